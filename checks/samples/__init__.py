"""The samples door's claims (python -m audit.samples)."""
