"""Sphinx configuration: ``make docs`` builds docs/_build/html with warnings as errors (furo theme;
tests/integration/docs renders it in a headless Chromium and checks no code block overflows)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _version() -> str:
    """The version pyproject.toml declares (the docs are built from the checkout, installed or not)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    return re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE).group(1)


project = "quark-brevitas"
author = "quark-brevitas contributors"
copyright = "2026, quark-brevitas contributors"
release = version = _version()
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
napoleon_google_docstring = True
html_theme = "furo"
html_title = f"quark-brevitas {release}"
html_static_path = ["_static"]
html_css_files = ["wide.css"]
html_theme_options = {"navigation_with_keys": True}
pygments_style = "friendly"
pygments_dark_style = "monokai"
suppress_warnings = ["myst.xref_missing"]  # links to source files of the repository, outside the docs


def _literal_absolute_values(app, what, name, obj, options, lines):
    """Docstrings write absolute values as |x| (plain text reads best); reST would take them for
    substitutions, so they are shown as literals."""
    pattern = re.compile(r"(?<![`\w])\|([^|`\s][^|`]*?)\|(?![`\w])")
    lines[:] = [pattern.sub(r"``|\1|``", line) for line in lines]


def _public_bases(app, name, obj, options, bases):
    """A private base (``_PerTensorFields``: fields that helpers share) is shown as its own public bases."""

    def public(cls):
        if not cls.__name__.startswith("_"):
            return [cls]
        return [p for base in cls.__bases__ for p in public(base)]

    bases[:] = list(dict.fromkeys(p for base in bases for p in public(base)))


def setup(app):
    app.connect("autodoc-process-docstring", _literal_absolute_values)
    app.connect("autodoc-process-bases", _public_bases)
