# Copyright: gpuprov contributors
# Apache-2.0
"""How the verification ladder runs things on the host: :class:`Runner` (a command with a timeout, never
raising), :func:`find_tool` (an executable on PATH or in the extra tool directories) and
:func:`python_candidates` (every ``python3`` that could have torch). Python 3.8, stdlib only."""


from __future__ import annotations

import glob
import os
import shutil
import subprocess


class Runner:
    """Runs a command with a timeout and returns ``(rc, stdout, stderr)``; rc None when it could not start or
    timed out (stderr says which)."""

    def __call__(self, argv, timeout, env=None, cwd=None):
        full_env = dict(os.environ)
        full_env.update(env or {})
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd,
                                  check=False)
        except subprocess.TimeoutExpired:
            return None, "", "timed out after %ss: %s" % (timeout, " ".join(argv))
        except OSError as exc:
            return None, "", "could not run %s: %s" % (argv[0], exc)
        return proc.returncode, proc.stdout, proc.stderr


def find_tool(name, tool_dirs, path=None):
    """Absolute path of executable ``name`` on PATH, else in ``tool_dirs`` (globs allowed); None if absent."""
    found = shutil.which(name, path=path)
    if found:
        return found
    for pattern in tool_dirs:
        for directory in sorted(glob.glob(pattern), reverse=True):
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None


def python_candidates(tool_dirs, path=None):
    """Every distinct ``python3`` on PATH and in ``tool_dirs``, in search order."""
    seen, out = set(), []
    dirs = (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep) + list(tool_dirs)
    for directory in dirs:
        candidate = os.path.join(directory, "python3") if directory else ""
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            # Not realpath: every virtual environment's python3 links to the same binary, yet each sees its
            # own site-packages (pyvenv.cfg sits beside the link).
            key = os.path.abspath(candidate)
            if key not in seen:
                seen.add(key)
                out.append(candidate)
    return out
