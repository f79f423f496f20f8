"""apt_pending and not_held: what apt and dpkg_selections would change, decided from one package read."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuprov.gpu.plugins.filter.deb_state import FilterModule, apt_pending, not_held

# as host_state returns it for libnccl2 and libnccl-dev: both installed, the -dev one pulled in (auto-installed)
STATE = {
    "versions": {"libnccl2": "2.26.2-1+cuda12.8", "libnccl-dev": "2.26.2-1+cuda12.8"},
    "selections": {"libnccl2": "hold", "libnccl-dev": "install", "libnccl1": "deinstall"},
    "auto_installed": ["libnccl-dev"],
}


def test_apt_pending_names_what_apt_would_change() -> None:
    names = ["libnccl2", "libnccl-dev", "libnccl-tests"]
    # installed at the pin and manual: nothing; auto-installed: apt marks it manual; absent: apt installs it
    assert apt_pending(names, STATE, "2.26.2-1+cuda12.8") == ["libnccl-dev", "libnccl-tests"]
    # another build pinned: apt replaces the installed one
    assert apt_pending(["libnccl2"], STATE, "2.26.2-1+cuda12.2") == ["libnccl2"]
    # name -> version, as the cuda role pins each toolkit; a name the dict lacks is pending
    assert apt_pending(["libnccl2", "x"], STATE, {"libnccl2": "2.26.2-1+cuda12.8"}) == ["x"]
    assert apt_pending([], STATE, "1") == []


def test_apt_pending_without_versions_keeps_any_installed_version() -> None:
    # name=NAME state=present: an installed, manually marked package stays at whatever version it has
    assert apt_pending(["libnccl2", "libnccl-dev", "libnccl-tests"], STATE) == ["libnccl-dev", "libnccl-tests"]
    assert apt_pending(["libnccl2"], STATE, None) == []


def test_not_held_keeps_order_and_counts_unknown_packages() -> None:
    assert not_held(["libnccl-dev", "libnccl2", "libnccl-tests", "libnccl1"], STATE) == [
        "libnccl-dev", "libnccl-tests", "libnccl1"]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: apt_pending(["a"], {"versions": {}}, "1"), "apt_pending: the state must be"),
        (lambda: apt_pending(["a"], STATE, 1), "apt_pending: versions must be a version string"),
        (lambda: not_held(["a"], "not a result"), "not_held: the state must be"),
    ],
)
def test_bad_input_names_the_filter_and_the_field(call: Callable[[], object], message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        call()


def test_filters_are_registered() -> None:
    assert set(FilterModule().filters()) == {"apt_pending", "not_held"}
