"""Sphinx configuration: ``make docs`` builds docs/_build/html with warnings as errors."""

project = "quark-brevitas"
author = "quark-brevitas contributors"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
napoleon_google_docstring = True
html_theme = "alabaster"
html_title = "quark-brevitas"
suppress_warnings = ["myst.xref_missing"]  # links to source files of the repository, outside the docs


def _literal_absolute_values(app, what, name, obj, options, lines):
    """Docstrings write absolute values as |x| (plain text reads best); reST would take them for
    substitutions, so they are shown as literals."""
    import re

    pattern = re.compile(r"(?<![`\w])\|([^|`\s][^|`]*?)\|(?![`\w])")
    lines[:] = [pattern.sub(r"``|\1|``", line) for line in lines]


def setup(app):
    app.connect("autodoc-process-docstring", _literal_absolute_values)
