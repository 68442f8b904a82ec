"""python -m audit.certify: the checkpoint door's command. Its name stays at the package root; its code and its
--help are in audit/task/certify.py."""
import sys

from audit.task.certify import main

if __name__ == "__main__":
    sys.exit(main())
