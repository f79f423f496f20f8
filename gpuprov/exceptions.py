"""One exception hierarchy for gpuprov; each error carries the process exit code the CLI returns.

Library code raises these and never prints or exits; :mod:`gpuprov.cli` turns them into a status.

Exit codes (documented in README.md, modelled on black's ``--check``):

* 0 - success (with ``--check``: no drift)
* 1 - drift found (``--check`` only); see :class:`DriftFound`
* 2 - invalid input or usage; see :class:`ConfigError` and subclasses
* 3 - one or more hosts failed or were unreachable; see :class:`HostsFailed`
* 4 - the local environment lacks something gpuprov needs (Docker, NVML, a tool)
* 130 / 143 - interrupted by SIGINT / SIGTERM; see :class:`Interrupted`
"""

from __future__ import annotations

from collections.abc import Sequence

EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_USAGE = 2
EXIT_HOSTS_FAILED = 3
EXIT_ENVIRONMENT = 4


class GpuprovError(Exception):
    """Base error: a message for the operator and the exit code the CLI returns."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(GpuprovError):
    """Bad input: a fleet file, an option or an argument. Exit 2."""

    exit_code = EXIT_USAGE


class FleetValidationError(ConfigError):
    """A fleet file failed validation; ``problems`` holds every problem found, not only the first.

    Each problem is a :class:`gpuprov.fleet.Problem` (file, line, field path, problem, fix).
    """

    def __init__(self, problems: Sequence[object]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class DriftFound(GpuprovError):
    """``--check`` found hosts that a real run would change. Exit 1."""

    exit_code = EXIT_DRIFT


class HostsFailed(GpuprovError):
    """A play failed on some hosts or could not reach them. Exit 3.

    ``hosts`` lists the failed and unreachable inventory names, sorted.
    """

    exit_code = EXIT_HOSTS_FAILED

    def __init__(self, message: str, hosts: list[str]) -> None:
        super().__init__(message)
        self.hosts = hosts


class Interrupted(GpuprovError):
    """The run was stopped by SIGINT (exit 130) or SIGTERM (exit 143); ansible-playbook was stopped and every
    process it had started (workers, modules, ssh in their own sessions) was ended."""

    exit_code = 130


class EnvironmentMissing(GpuprovError):
    """The local machine lacks something gpuprov needs (Docker, a tool, a built image). Exit 4."""

    exit_code = EXIT_ENVIRONMENT


class NVMLUnavailable(EnvironmentMissing):
    """NVML could not be initialised; ``nvml_error`` is the NVML error name (e.g. NVML_ERROR_DRIVER_NOT_LOADED)."""

    def __init__(self, message: str, nvml_error: str) -> None:
        super().__init__(message)
        self.nvml_error = nvml_error
