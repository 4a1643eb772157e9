"""The operator panel (the Flight Deck): served by ``rowfleet panel`` with ``http.server``.

So far it holds the charts (``svg.py``: inline SVG drawn by pure functions, gaps never
bridged). This package is where the panel's code and its assets go, so that they ship
inside the ``.pyz``: modules for the routes and pages, and its stylesheet and scripts as
package data read with ``importlib.resources`` (never from the working folder).
It renders the fleet read model (``rowfleet.views.snapshot``) and writes nothing but operators'
switches and job actions through the store, like the command line. The top-level ``web/``
folder is the documentation site: it is not shipped and the panel never reads it.
"""
