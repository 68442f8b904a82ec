"""The task door's claims (python -m audit.certify)."""
