"""The one table of MPI message tags used by mpiopt's point-to-point code.

Every reducer sends on its own private duplicate of the user's communicator
(``Reducer.__init__`` calls ``comm.Dup()``), and so does the asynchronous
parameter server, so no tag here can ever match a message of the user's or of
another reducer.  Within one communicator a tag names one kind of message, and
MPI's non-overtaking rule keeps messages of the same kind between the same two
ranks in order, call after call.  Keeping every tag in this one table makes
each kind of message distinct even when reading a trace of several reducers.

A reducer written outside mpiopt may use any tag on its own ``self.comm``;
``USER`` and above are never used here.
"""

# Ring (ring.py): reduce-scatter steps, the segmented variant's segments, all-gather steps.
RING_REDUCE = 0
RING_SEGMENT = 1
RING_GATHER = 2

# Recursive doubling and halving (recursive_doubling.py).
RD_FOLD = 10          # an even rank of the first 2 rem hands its data to the odd rank above it
RD_UNFOLD = 11        # ... and gets its result back
RD_EXCHANGE = 12      # recursive doubling all-reduce: whole buffers
RD_HALVING = 13       # recursive halving reduce-scatter: half of the current range
RD_GATHER = 14        # recursive doubling all-gather: the range gathered so far

# Synchronous parameter servers (parameter_server.py).
PS_PUSH = 20
PS_RESULT = 21

# Ping-pong that fits alpha and beta (models.py; on the communicator it is given).
PING_PONG = 30

# Asynchronous parameter server (async_server.py).
ASYNC_PUSH = 40
ASYNC_PULL = 41
ASYNC_MODEL = 42
ASYNC_DONE = 43

# Heterogeneous-worker SGD on MPI (mpiopt/asyncsgd/mpi.py).
ASGD_JOB = 50         # server -> worker: compute a gradient at this point (cancels the worker's current one)
ASGD_GRAD = 51        # worker -> server: a finished gradient, with its job number and step
ASGD_STOP = 52        # server -> worker: the run is over
ASGD_DONE = 53        # worker -> server: this worker will send nothing more
ASGD_ERROR = 54       # worker -> server: this worker failed (the message's text)
ASGD_ROUTE = 55       # worker -> neighbour on a graph's topology: a JOB or a GRAD forwarded along the tree
ASGD_FLUSH = 56       # server -> worker: how many forwarded messages to drain before it may stop
ASGD_SIGNAL = 57      # worker -> server: this worker had a SIGUSR1 or a SIGTERM ([usr1, term])

USER = 100
