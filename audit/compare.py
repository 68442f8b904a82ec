"""python -m audit.compare: do two answers agree. Its name stays at the package root; its code and its --help are in
audit/core/compare.py."""
import sys

from audit.core.compare import main

if __name__ == "__main__":
    sys.exit(main())
