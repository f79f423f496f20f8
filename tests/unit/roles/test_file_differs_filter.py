"""file_differs: whether a template or copy task would change a file, decided from one host_state read."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuprov.gpu.plugins.filter.host_state import FilterModule, file_differs
from ansible_collections.gpuprov.gpu.plugins.module_utils.host_files import path_state, read_text


def _state(*paths: str) -> dict[str, object]:
    # what host_state returns for paths=[...] and read=[...]: the module's own readers
    return {"paths": {p: path_state(p) for p in paths}, "files": {p: read_text(p) for p in paths}}


def test_same_text_mode_and_owner_is_no_change(tmp_path) -> None:
    f = tmp_path / "cuda.sh"
    f.write_text("export A=1\n")
    f.chmod(0o644)
    st = f.stat()
    assert file_differs(_state(str(f)), str(f), "export A=1\n", "0644", st.st_uid, st.st_gid) is False


@pytest.mark.parametrize(
    ("text", "mode", "owner_shift", "content"),
    [
        ("export A=1\n", 0o644, 0, "export A=2\n"),  # the text differs
        ("export A=1", 0o644, 0, "export A=1\n"),  # only the trailing newline differs
        ("export A=1\r\n", 0o644, 0, "export A=1\n"),  # only the line ending differs (a file saved on Windows)
        ("export A=1\r", 0o644, 0, "export A=1\n"),
        ("export A=1\n", 0o600, 0, "export A=1\n"),  # the mode differs
        ("export A=1\n", 0o644, 1, "export A=1\n"),  # the owner differs
    ],
)
def test_a_difference_in_text_mode_or_owner_is_a_change(tmp_path, text, mode, owner_shift, content) -> None:
    f = tmp_path / "cuda.sh"
    f.write_bytes(text.encode())  # as it is on disk: no newline translation
    f.chmod(mode)
    st = f.stat()
    assert file_differs(_state(str(f)), str(f), content, "0644", st.st_uid + owner_shift, st.st_gid) is True


def test_a_missing_file_or_a_directory_is_a_change(tmp_path) -> None:
    missing, folder = tmp_path / "absent.conf", tmp_path / "dir.conf"
    folder.mkdir()
    state = _state(str(missing), str(folder))
    assert file_differs(state, str(missing), "") is True
    assert file_differs(state, str(folder), "") is True


@pytest.mark.parametrize("state", [None, {}, {"paths": {}, "files": {}}, {"paths": {"/x": {}}}])
def test_a_state_without_the_path_names_the_filter(state) -> None:
    with pytest.raises(AnsibleFilterError, match="file_differs: the state must be a host_state result with '/x'"):
        file_differs(state, "/x", "")


def test_the_plugin_exports_the_filter() -> None:
    assert FilterModule().filters() == {"file_differs": file_differs}
