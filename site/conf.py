"""Sphinx configuration of the course site; site/build.py copies it into the staged sources."""

project = "JAX multi-host data parallelism on one laptop"
author = "the course's authors"
copyright = "the course's authors, Apache-2.0"
root_doc = "index"
extensions = ["myst_nb"]
exclude_patterns = ["downloads"]  # the committed .ipynb files, offered as downloads

# The committed notebooks are shown as they are: the outputs nbval checks, never re-executed.
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # the notebooks' headings may skip a level; not a broken page

# Widget views are rendered from each notebook's saved widget state by the widget manager's
# own JavaScript, shipped in _static/widgets/ (site/build.py puts it there), not from a CDN.
nb_ipywidgets_js = {
    "widgets/require.js": {},
    "widgets/embed-amd.js": {"data-jupyter-widgets-cdn": "widgets/unavailable/"},
}

html_theme = "sphinx_book_theme"
html_title = "JAX multi-host course"
html_static_path = ["_static"]
html_extra_path = ["_extra"]  # the widget manager's fonts (site/build.py)
html_favicon = "_static/favicon.svg"
html_context = {"default_mode": "light"}
html_css_files = ["course.css"]
html_js_files = [("course-a11y.js", {"defer": "defer"})]  # names for the theme's unnamed controls
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,  # each notebook page has its own download link
    "home_page_in_toc": True,
}
html_last_updated_fmt = None
html_show_sourcelink = False
html_copy_source = False
