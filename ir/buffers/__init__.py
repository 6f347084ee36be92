"""Where values live and for how long: the memory ops `lamina.free` and `lamina.move` and memory
tiers (`memory`), and which results of a training step replace which arguments, with the roles
those arguments hold (`updates`).

Above placement (a tier is part of a value's placement), below the op classes (which check
frees and tiers).
"""
