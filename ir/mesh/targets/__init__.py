"""Built-in target descriptions (`*.toml` data files beside this module; see `lamina.ir.mesh.target`)."""
