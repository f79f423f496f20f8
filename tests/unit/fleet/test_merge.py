"""Tests for gpuprov.fleet.merge: precedence and origin tracking."""

from __future__ import annotations

from gpuprov.fleet.merge import deep_merge, merge_layers, origin_of


def test_later_layers_win_and_mappings_merge() -> None:
    merged, origins = merge_layers([
        (("settings",), {"driver": {"branch": "535", "method": "distro"}, "proxy": {"no_proxy": ["a"]}}),
        (("groups", "g", "settings"), {"driver": {"branch": "570"}, "proxy": {"no_proxy": ["b"]}}),
    ])
    assert merged == {"driver": {"branch": "570", "method": "distro"}, "proxy": {"no_proxy": ["b"]}}
    assert origin_of(origins, ("driver", "branch")) == ("groups", "g", "settings", "driver", "branch")
    assert origin_of(origins, ("driver", "method")) == ("settings", "driver", "method")
    assert origin_of(origins, ("driver", "flavour")) is None


def test_env_references_replace_instead_of_merging() -> None:
    assert deep_merge({"http": {"env": "A"}}, {"http": {"env": "B"}}) == {"http": {"env": "B"}}
    assert deep_merge({"http": "http://x"}, {"http": {"env": "B"}}) == {"http": {"env": "B"}}
