"""Entry point of the ``gpuprov`` console script: runs the click group and maps errors to exit codes."""

from __future__ import annotations

import logging
import os
import sys

import click

from gpuprov.cli import cli
from gpuprov.exceptions import FleetValidationError, GpuprovError
from gpuprov.redact import redact_credentials


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``) and return the exit code.

    A :class:`~gpuprov.exceptions.GpuprovError` is printed as ``gpuprov: error: <message>`` on stderr
    and returns its ``exit_code``; click's usage errors return 2. Set ``GPUPROV_DEBUG=1`` to log at
    debug level.
    """
    logging.basicConfig(
        level=logging.DEBUG if os.environ.get("GPUPROV_DEBUG") else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    args = sys.argv[1:] if argv is None else list(argv)
    # a path from argv that is not UTF-8 holds surrogate escapes (U+DC80-U+DCFF); printed in a message it would
    # raise UnicodeEncodeError, so such characters are written as backslash escapes instead
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        code = cli.main(args=args, prog_name="gpuprov", standalone_mode=False, obj={"argv": args})
    except FleetValidationError as exc:
        for problem in exc.problems:
            click.echo(str(problem))
        count = len(exc.problems)
        click.echo(f"gpuprov: error: {count} problem{'s' if count != 1 else ''} in the fleet file; nothing was run",
                   err=True)
        return exc.exit_code
    except GpuprovError as exc:
        click.echo(f"gpuprov: error: {redact_credentials(exc.message)}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("gpuprov: aborted", err=True)
        return 130
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
