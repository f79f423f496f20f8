"""The fleet file: loading with line numbers, schema, validation and the resolved :class:`Fleet`.

Public API::

    load_fleet(path: Path, *, check_files: bool = False) -> Fleet
        # raises FleetValidationError(problems) listing every problem; check_files: the SSH key and
        # known_hosts files the fleet names must exist on this controller (gpuprov validate)

A :class:`Fleet` holds each :class:`Host` with its :class:`Connection`, group membership, effective
settings (merged, defaults applied, ``auto`` resolved, see :class:`Resolution`) and the raw layers
(:attr:`Fleet.settings`, :attr:`Fleet.groups`, :attr:`Host.layer`) that rendering needs.
"""

from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet.model import Connection, Fleet, Host, Resolution
from gpuprov.fleet.problem import Problem
from gpuprov.fleet.validate import load_fleet

__all__ = ["Connection", "Fleet", "FleetValidationError", "Host", "Problem", "Resolution", "load_fleet"]
