"""The dashboard's page families, one `APIRouter` each, in the order `create_app` includes them
(which is also the order routes are matched in, and of the nav bar and the API index).

A family is a module with:
- `router`: an `APIRouter` holding its HTML pages and their JSON twins under `/api/`, each pair
  registered together, both built from one data function;
- `API`: its endpoints for the `/api` index (path with parameters -> what it answers);
- `NAV`: its links in the nav bar (`(href, label)`), possibly none.

Adding a family is adding its module here.
"""

from __future__ import annotations

from types import ModuleType

from dashboard.pages import docs, models, op_sweep, ops, overview, runs, service

FAMILIES: tuple[ModuleType, ...] = (overview, models, ops, op_sweep, runs, docs, service)
