"""The url_shown rule the cuda and cudnn roles show their download URLs through (their get_url task is not logged
where the shown URL differs): user information and query values hidden. The roles' own vars are rendered by
Ansible's templating with the collection loader (tests/unit/test_bundle.py's role_template)."""

from __future__ import annotations

import pytest
from ansible_collections.gpuprov.gpu.plugins.plugin_utils.urls import url_shown

from tests.unit.test_bundle import role_template


@pytest.mark.parametrize(("url", "shown"), [
    ("https://m.example.com/cuda_12.8.1_570.124.06_linux.run", "https://m.example.com/cuda_12.8.1_570.124.06_linux.run"),
    ("file:///srv/cuda.run", "file:///srv/cuda.run"),
    ("https://bob:hunter2@m.example.com/f.run", "https://***@m.example.com/f.run"),
    ("HTTPS://bob:hunter2@m.example.com/f.run", "https://***@m.example.com/f.run"),
    ("https://hunter2@m.example.com/f.run", "https://***@m.example.com/f.run"),  # a token alone as the user
    ("https://m.example.com/f.run?X-Amz-Signature=hunter2&v=1", "https://m.example.com/f.run?X-Amz-Signature=***&v=***"),
    ("https://m.example.com/f.run?hunter2", "https://m.example.com/f.run?***"),
    ("https://[::1/f.run?hunter2", "***"),  # not parseable: not shown at all
])
def test_the_shown_url_hides_user_information_and_query_values(url: str, shown: str) -> None:
    assert url_shown(url) == shown


@pytest.mark.parametrize(("role", "url_var", "shown_var"), [
    ("cuda", "cuda_runfile_url", "__cuda_runfile_url_shown"),
    ("cudnn", "cudnn_archive_url", "__cudnn_archive_url_shown"),
])
def test_the_roles_show_their_urls_through_the_rule(role: str, url_var: str, shown_var: str) -> None:
    url = "https://tok3n@m.example.com/f?token=hunter2"
    assert role_template(role, {url_var: url}, f"{{{{ {shown_var} }}}}") == "https://***@m.example.com/f?token=***"
