"""The lab fleet: local systemd containers that look like bare GPU servers, for tests and demos.

* :mod:`gpuprov.lab.images` builds the base images (``gpuprov-lab-debian12`` and the Ubuntu stand-ins
  ``gpuprov-lab-ubuntu2004``, ``-ubuntu2204``, ``-ubuntu2404``, :mod:`gpuprov.lab.imagespecs`) from Debian
  packages with debootstrap;
* :mod:`gpuprov.lab.containers` runs them (``gpuprov lab up/status/down``), reachable over SSH on
  127.0.0.1 with a generated key and strict host-key checking;
* :mod:`gpuprov.lab.fleetfile` writes the lab's fleet file (docs/design.md, version 1);
* :mod:`gpuprov.lab.mocknvml` is a mock ``libnvidia-ml.so.1`` with the readings of real GPU hosts, which
  the real ``nvidia-smi`` and pynvml run on;
* :mod:`gpuprov.lab.standin` builds signed stand-ins of the apt repositories (NVIDIA's CUDA repository, the
  distributions' archives, libnvidia-container, DCGM) that NVIDIA's own cannot be reached for.

The lab is a test double of a GPU fleet: no runtime module imports it (only ``gpuprov lab``, when it runs),
and its Docker SDK comes with the ``gpuprov[lab]`` extra.

Lab state (keys, known_hosts, the host layout) lives in ``$GPUPROV_STATE_DIR/lab``
(default ``~/.local/state/gpuprov/lab``). See docs/lab.md.
"""
