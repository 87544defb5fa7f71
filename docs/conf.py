"""Sphinx configuration of tfattn's documentation site.

Build it as CI does (strict: any warning, such as a broken link, a page in
no table of contents or a docstring that does not render, fails):

    python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))
# The site's own extensions (docs/_ext/): constructor signatures, inherited
# methods, and the tables generated from the code (hparams, flags).
sys.path.insert(0, os.path.abspath("_ext"))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

project = "tfattn"
author = "the tfattn authors"
copyright = "2026, the tfattn authors"
release = "0.1.0"

extensions = [
    "myst_parser",  # the guides are Markdown, as the README is
    "sphinx.ext.autodoc",  # the API reference, from the docstrings
    "sphinx.ext.napoleon",  # which are written in the Google style
    "sphinx.ext.viewcode",
    "tfattn_autodoc",  # real signatures; tfattn's inherited methods
    "tfattn_tables",  # the hparams and train.py flag tables
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3

# Inherited members are asked for, and tfattn_autodoc.skip_inherited keeps
# those tfattn defines (a mixin's `init_cache`, `Transformer.generate`),
# not the hundreds a Keras layer inherits from Keras.
autodoc_default_options = {
    "members": True,
    "inherited-members": True,
    "show-inheritance": True,
}
autodoc_member_order = "bysource"
autodoc_typehints = "none"
# An override without a docstring does not borrow its base's (Keras's).
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# NamedTuple fields are documented by autodoc already: Attributes sections
# become field lists, not a second description of each field.
napoleon_use_ivar = True

html_theme = "furo"
html_title = "tfattn"
html_static_path = []
