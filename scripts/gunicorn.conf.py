"""gunicorn settings for scripts/demo.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group: to the arbiter, which
then sends every worker SIGQUIT, and to the workers themselves. A gthread worker's quit handler
then ran twice, the second time nested inside the first one's thread-pool shutdown, and the
worker could stay alive holding the port. Workers ignore SIGINT here, so the arbiter's SIGQUIT
is the one signal that stops them.
"""

import signal


def post_worker_init(worker):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
