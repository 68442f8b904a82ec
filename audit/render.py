"""python -m audit.render: renders a task audit's evidence into its report again. Its name stays at the package root;
its code and its --help are in audit/task/render.py."""
import sys

from audit.task.render import main

if __name__ == "__main__":
    sys.exit(main())
