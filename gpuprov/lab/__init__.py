"""The lab fleet: local systemd containers that look like bare GPU servers, for tests and demos.

* :mod:`gpuprov.lab.images` builds the base images (``gpuprov-lab-debian12``,
  ``gpuprov-lab-ubuntu2004``) from Debian packages with debootstrap;
* :mod:`gpuprov.lab.containers` runs them (``gpuprov lab up/status/down``), reachable over SSH on
  127.0.0.1 with a generated key and strict host-key checking;
* :mod:`gpuprov.lab.fleetfile` writes the lab's fleet file (docs/design.md, version 1).

Lab state (keys, known_hosts, the host layout) lives in ``$GPUPROV_STATE_DIR/lab``
(default ``~/.local/state/gpuprov/lab``). See docs/lab.md.
"""
