"""python -m audit.bench_stress: seconds per stress batch, serial vs stacked (make bench). Its name stays at the
package root; its code and its --help are in audit/task/bench_stress.py."""
import sys

from audit.task.bench_stress import main
from rlhf.errors import run_cli

if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m audit.bench_stress"))
