"""The jinja2 templates and JSON schemas of both doors' reports. A package only so that it installs inside the
audit package (pyproject.toml maps it to audit.templates); audit.core.resources finds it there."""
