"""The text format: reading a program (`source`: context, located parser, verifier, `load`), the
parser's lexer and recovery (`lexer`, `robust_parser`) and result names (`result_names`).

A top layer of `lamina.ir`, beside the builders: reading a program needs every op class.
"""
