"""Multi-GPU image workers fed by a durable queue (``gpuprov images ...``).

:mod:`gpuprov.images.queue` holds the queues (sqlite on one host, Redis Streams across hosts)
behind one interface, :class:`gpuprov.images.queue.Queue`.
"""

from __future__ import annotations

from gpuprov.images.queue import Queue, QueueStats, Task, open_queue

__all__ = ["Queue", "QueueStats", "Task", "open_queue"]
