"""python -m audit.diagnostic: the gold-free diagnostic on one reward model (a contract: its flags and its output
stay as they are). Its name stays at the package root; its code and its --help are in audit/task/diagnostic.py."""
import sys

from audit.task.diagnostic import main
from rlhf.errors import run_cli

if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m audit.diagnostic"))
