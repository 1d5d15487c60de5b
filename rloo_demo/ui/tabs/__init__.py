"""The page's tabs, in the order they show: each module's ``build(page)`` makes its tab and returns its ``Tab``
(``ui.common``). A new tab is one module here and its line in ``TABS`` (docs/development.md, "Add a tab")."""

from rloo_demo.ui.tabs import compare, lessons, rollouts, runs, train

TABS = (train, rollouts, compare, runs, lessons)
