"""What a run leaves for the admin to act on, and the message a failed task gives, from ansible-runner's events.

A host's *needs* (printed as the recap's "needs the admin" section and in ``--json`` as ``hosts.<name>.needs``)
are a list of ``{"kind", "role", "subject", "detail"}`` dicts:

* ``reboot``: a role's ``<role>_reboot_required`` fact (the roles' convention for a reboot they did not do) is
  true at the end of the run; the role's own entry in ``ansible_facts['gpuprov_needs']`` adds what it knows
  (nvidia_driver: the kernel the next boot starts and whether the nvidia module for it is built);
* ``service``: a task of a service module (``systemd_service``, ``systemd``, ``service``) failed: a service
  did not start or stop; ``subject`` is the loop item or the task, ``detail`` the module's message;
* ``finding``: a finding a role published (``ansible_facts['gpuprov_findings']``, e.g. bios_check) at
  severity ``warn`` or ``fail``.
"""

from __future__ import annotations

from typing import Any

from gpuprov.redact import redact_credentials

#: Task actions that start, stop or restart a service (their failure is a "service" need).
SERVICE_ACTIONS = frozenset(
    f"{prefix}{name}" for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for name in ("systemd", "systemd_service", "service")
)
#: Finding severities the admin must act on.
NEED_SEVERITIES = ("fail", "warn")
#: Messages that say only that something failed; the module's own result holds the reason.
_GENERIC = ("One or more items failed", "Request failed", "non-zero return code", "MODULE FAILURE")


def truthy(value: object) -> bool:
    """A fact's boolean value as Ansible would read it (``True``, ``"true"``, ``"yes"``, ``1``)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def item_label(res: dict[str, Any]) -> str:
    """The loop item a per-item result belongs to: its ``loop_control.label``, else the item itself."""
    label = res.get("_ansible_item_label", res.get("item", ""))
    return redact_credentials(label if isinstance(label, str) else str(label))


def failure_message(res: dict[str, Any], limit: int = 2000) -> str:
    """The reason a task failed, from its result ``res``, at most ``limit`` characters.

    ``msg`` as the module gave it; for a loop ("One or more items failed") each failed item's label and
    message; for an HTTP request (``get_url``, ``uri``: "Request failed") the status code, reason and URL;
    for a command ("non-zero return code") its rc and the last lines of stderr (or stdout).
    """
    msg = str(res.get("msg", "") or "")
    results = res.get("results")
    if isinstance(results, list) and any(isinstance(r, dict) and r.get("failed") for r in results):
        failed = [r for r in results if isinstance(r, dict) and r.get("failed")]
        text = "; ".join(f"{item_label(r)}: {failure_message(r, limit)}" for r in failed)
        return redact_credentials(text if not msg or msg.startswith(_GENERIC[0]) else f"{msg}: {text}")[:limit]
    details: list[str] = []
    if "status_code" in res and res.get("status_code") not in (None, -1, 200):
        details.append(f"HTTP {res['status_code']}")
    if res.get("response") and str(res["response"]) not in msg:
        details.append(str(res["response"]))
    if res.get("url") and (details or msg.startswith(_GENERIC[1])):
        details.append(str(res["url"]))
    if "rc" in res and res.get("rc") not in (None, 0) and (not msg or msg.startswith(_GENERIC[2:])):
        output = str(res.get("stderr") or res.get("stdout") or "").strip().splitlines()
        details.append(f"rc {res['rc']}" + (f": {' / '.join(output[-3:])}" if output else ""))
    stderr_lines = str(res.get("module_stderr") or "").strip().splitlines()
    if stderr_lines and msg.startswith(_GENERIC[3]):
        details.append(stderr_lines[-1])
    text = f"{msg} ({', '.join(details)})" if msg and details else msg or ", ".join(details)
    return redact_credentials(text)[:limit]  # a mirror URL may carry user:password


def host_needs(reboot_required: dict[str, bool], reported: list[dict[str, Any]], failures: list[dict[str, str]],
               findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A host's needs (see the module docstring), reboots first, then services, then findings.

    ``reboot_required`` is role -> the last value of its ``<role>_reboot_required`` fact, ``reported`` the last
    ``gpuprov_needs`` the roles published, ``failures`` the host's failed tasks (``{role, task, msg, action,
    item}``), ``findings`` its last ``gpuprov_findings``.
    """
    needs: list[dict[str, Any]] = []
    by_role = {str(n.get("role")): n for n in reported if isinstance(n, dict) and n.get("kind") == "reboot"}
    for role, required in sorted(reboot_required.items()):
        if not required:
            continue
        entry = by_role.get(role)
        if entry is not None:
            needs.append({**entry, "kind": "reboot", "role": role})
        else:
            needs.append({"kind": "reboot", "role": role, "subject": "host",
                          "detail": f"reboot required ({role}_reboot_required is true)"})
    for failure in failures:
        if failure.get("action") in SERVICE_ACTIONS and failure.get("state", "failed") == "failed":
            needs.append({"kind": "service", "role": failure.get("role", ""),
                          "subject": failure.get("item") or failure.get("task", ""), "detail": failure.get("msg", "")})
    for finding in findings:
        if finding.get("severity") in NEED_SEVERITIES:
            fix = f" - fix: {finding['fix']}" if finding.get("fix") else ""
            needs.append({"kind": "finding", "role": str(finding.get("role", "")),
                          "subject": str(finding.get("subject") or finding.get("id", "")),
                          "detail": f"{finding.get('severity')}: {finding.get('id', '')}: "
                                    f"{finding.get('evidence', '')}{fix}"})
    return needs
