"""Placement on a device mesh: the mesh op and the `#lamina.place` attribute (`placement`), the
sharding rules ops are placed by (`sharding`, `sharding_gather`), the collectives that change a
placement (`collective_kinds`, `collectives`) and the machines they run on (`target`, `targets/`).

Below the op table: a row names its sharding rule, so these modules know ops only through
`sharding.OpInfo`, a structural type, never through the table itself.
"""
