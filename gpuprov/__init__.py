"""gpuprov: turn bare multi-GPU servers into image-processing machines, driven by one fleet file.

The package validates a fleet file (:mod:`gpuprov.fleet`), checks it against NVIDIA's published
compatibility data (:mod:`gpuprov.matrix`), renders it to a plain Ansible inventory
(:mod:`gpuprov.render`) and runs the roles through ansible-runner (:mod:`gpuprov.runner`).
"""

__version__ = "0.1.0"
