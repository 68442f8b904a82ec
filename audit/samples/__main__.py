"""python -m audit.samples: the samples door's command (audit/samples/certify.py)."""
import sys

from audit.samples.certify import main

if __name__ == "__main__":
    sys.exit(main())
