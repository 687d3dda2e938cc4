"""Built-in execution modules (one file per module, Salt's names and return shapes)."""
