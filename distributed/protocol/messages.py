"""Every wire message, declared once, grouped by who sends it.

Requests carry ``op`` (and optionally ``reply: False``); messages on batched
streams carry ``op`` only.  Handlers receive a message only after it matched its
declaration (see :mod:`distributed.protocol.schema`).

Sequences are declared as ``Sequence``: they arrive as tuples over TCP and as
lists in process.  User objects (task specifications, results, exceptions)
travel as :data:`Payload`: serialised frames the scheduler never opens.
The coordination primitives' messages are in
:mod:`distributed.protocol.coordination_messages`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, NotRequired, TypedDict

from distributed.protocol.coordination_messages import PrimitiveName
from distributed.protocol.wire_types import Key as Key
from distributed.protocol.wire_types import Payload as Payload


# -- shared ---------------------------------------------------------------------
class ErrorInfo(TypedDict):
    """An exception raised by user code, as it travels."""

    exception: Payload
    traceback: Any
    text: str


class Empty(TypedDict):
    """A request with no fields besides ``op``."""

    op: str


class IdentityRequest(TypedDict):
    """Ask for the scheduler's identity; ``n_workers`` caps the workers listed (all when -1 or absent)."""

    op: str
    n_workers: NotRequired[int]


class VersionsRequest(TypedDict):
    """Ask a scheduler (for itself and its workers) or a worker for its versions, with ``packages`` besides
    the usual ones."""

    op: Literal["versions"]
    packages: NotRequired[Sequence[str] | None]


class SetMetadata(TypedDict):
    """Put ``value`` (msgpack-able) at the path ``keys`` of the scheduler's metadata."""

    op: Literal["set_metadata"]
    keys: Sequence[Any]
    value: Any


class GetMetadata(TypedDict):
    """Read the scheduler's metadata at the path ``keys``: ``{"value": ...}``, or ``{}`` when there is none."""

    op: Literal["get_metadata"]
    keys: Sequence[Any]


class DumpState(TypedDict):
    """Ask the scheduler for its state as plain data (``Client.dump_cluster_state``), without the fields
    named in ``exclude``."""

    op: Literal["dump_state"]
    exclude: Sequence[str]


def request(op: str, **fields: Any) -> dict[str, Any]:
    """The request ``op`` with ``fields``, for a caller that learns the op only at run time.

    Senders that know what they send build its declared ``TypedDict``; this is
    the generic path (``rpc.call(op, **fields)``), whose caller names the op
    and its fields as the declaration does.  The receiver checks the request
    against the op's declaration like any other, so a wrong field is refused
    there.

    Examples
    --------
    >>> request("who_has", keys=["x"])
    {'op': 'who_has', 'keys': ['x']}
    """
    return {"op": op, **fields}


# -- client -> scheduler (requests) -------------------------------------------------
class RegisterClient(TypedDict):
    op: Literal["register-client"]
    client: str
    versions: NotRequired[Mapping[str, Any]]


class RegisterClientReply(TypedDict):
    """The scheduler's answer to ``register-client``, before the stream starts."""

    status: Literal["OK"]
    time: float
    address: str
    id: str
    #: Ports of the scheduler's services by name (``dashboard``): what ``Client.dashboard_link`` needs.
    services: Mapping[str, int]
    #: The packages whose versions differ between the client, the scheduler and the workers (a table).
    warning: NotRequired[str]
    #: The scheduler's identity without its workers (their count, threads, memory): what ``repr(client)`` shows.
    identity: NotRequired[Mapping[str, Any]]


class KeysRequest(TypedDict):
    op: str
    keys: Sequence[Key]


class MemorySamplerStart(TypedDict):
    """Sample the cluster's memory under ``key`` every ``interval`` seconds (``MemorySampler``)."""

    op: str
    key: str
    measure: str
    interval: float


class BenchmarkHardware(TypedDict):
    """Measure the workers' memory, disk and network bandwidths for ``duration`` seconds per size."""

    op: str
    duration: NotRequired[float]


class BenchmarkLocal(TypedDict):
    """Measure one worker's memory or disk bandwidth (bytes/s) for each of ``sizes`` (``"1 MiB"``, ...;
    dask's sizes when absent)."""

    op: str
    sizes: NotRequired[Sequence[str]]
    duration: float


class BenchmarkNetwork(TypedDict):
    """Measure the bandwidth (bytes/s) from one worker to the peer at ``address``, for each of ``sizes``."""

    op: str
    address: str
    sizes: NotRequired[Sequence[str]]
    duration: float


class Echo(TypedDict):
    """Send ``data`` back (a server's ``echo``: what network benchmarks bounce)."""

    op: str
    data: NotRequired[Any]


class MemorySamplerStop(TypedDict):
    """Stop the sampling under ``key``; the reply is its ``(time, bytes)`` samples."""

    op: str
    key: str


class TaskMetadataRequest(TypedDict):
    """Start or stop collecting task metadata under ``name`` (``get_task_metadata``)."""

    op: str
    name: str


class KeyRequest(TypedDict):
    """A request about one key (``get_runspec``)."""

    op: str
    key: Key


class RunSpecReply(TypedDict):
    """A task's run specification as the client sent it, and the keys it reads (``get_runspec``)."""

    run_spec: Payload | None
    dependencies: Sequence[Key]


class OptionalKeysRequest(TypedDict):
    op: str
    keys: NotRequired[Sequence[Key] | None]


class WorkersRequest(TypedDict):
    op: str
    workers: NotRequired[Sequence[str] | None]


class UpdateData(TypedDict):
    """Client -> scheduler after scattering data straight to workers."""

    op: Literal["update-data"]
    client: str
    who_has: Mapping[Key, Sequence[str]]
    nbytes: Mapping[Key, int]
    types: NotRequired[Mapping[Key, str]]


class CancelKeys(TypedDict):
    op: Literal["cancel-keys"]
    client: str
    keys: Sequence[Key]
    force: NotRequired[bool]
    reason: NotRequired[str]


class RetryKeys(TypedDict):
    op: Literal["retry"]
    client: str
    keys: Sequence[Key]


class RunFunction(TypedDict):
    """Run a user function: on the scheduler, or on workers through it."""

    op: str
    function: Payload
    args: NotRequired[Payload | None]
    kwargs: NotRequired[Payload | None]
    workers: NotRequired[Sequence[str] | None]
    wait: NotRequired[bool]
    nanny: NotRequired[bool]


class StoryRequest(TypedDict):
    op: Literal["story"]
    keys: Sequence[Key]


class RetireWorkers(TypedDict):
    """Retire workers: move the data only they hold to others, then forget (``remove``) and close them.

    ``workers`` (addresses) or ``names`` say which; else ``n``, ``target``,
    ``minimum`` and ``memory_ratio`` choose them (as ``workers_to_close``).
    """

    op: Literal["retire_workers"]
    workers: NotRequired[Sequence[str] | None]
    names: NotRequired[Sequence[Any] | None]
    n: NotRequired[int | None]
    target: NotRequired[int | None]
    minimum: NotRequired[int | None]
    memory_ratio: NotRequired[float | None]
    #: A callable ``WorkerState -> group``, pickled by the caller: groups are retired whole.
    key: NotRequired[Payload | None]
    close_workers: NotRequired[bool]
    remove: NotRequired[bool]
    stimulus_id: NotRequired[str | None]


class WorkersToClose(TypedDict):
    """Which workers could be retired at low cost (``Scheduler.workers_to_close``), as their ``attribute``.

    ``key`` is a callable ``WorkerState -> group``, pickled by the caller (the
    scheduler runs it, as it runs a function sent to ``run_on_scheduler``):
    the workers of a group are chosen together or not at all.
    """

    op: Literal["workers_to_close"]
    n: NotRequired[int | None]
    target: NotRequired[int | None]
    minimum: NotRequired[int | None]
    memory_ratio: NotRequired[float | None]
    key: NotRequired[Payload | None]
    attribute: NotRequired[str]


class AdaptiveTarget(TypedDict):
    """How many workers the scheduler's load wants (``Scheduler.adaptive_target``)."""

    op: Literal["adaptive_target"]
    target_duration: NotRequired[float | None]


class Replicate(TypedDict):
    """Have ``n`` workers (of ``workers``; all when None) hold each key; the call returns once they do."""

    op: Literal["replicate"]
    keys: Sequence[Key]
    n: NotRequired[int | None]
    workers: NotRequired[Sequence[str] | None]
    #: How many new copies each holder serves per round (copies spread as a tree).
    branching_factor: NotRequired[int]


class Rebalance(TypedDict):
    """Move keys (these, or all in memory) from workers using more memory than the mean to the others."""

    op: Literal["rebalance"]
    keys: NotRequired[Sequence[Key] | None]
    workers: NotRequired[Sequence[str] | None]


class WaitForWorkers(TypedDict):
    op: Literal["wait_for_workers"]
    n_workers: int


class RegisterPlugin(TypedDict):
    op: Literal["register_scheduler_plugin"]
    plugin: Payload
    name: str
    idempotent: NotRequired[bool]


class UnregisterPlugin(TypedDict):
    op: Literal["unregister_scheduler_plugin"]
    name: str


class TaskSpec(TypedDict):
    """One task of an ``update-graph``."""

    run_spec: Payload | None
    dependencies: Sequence[Key]
    order: int
    annotations: NotRequired[Mapping[str, Any]]
    #: The task's result is an actor: it stays on its worker, callers get a proxy.
    actor: NotRequired[bool]


class ProgressWatch(TypedDict):
    """Watch the tasks ``keys`` need that are not done yet (``distributed.progress``).

    The reply is a :class:`ProgressState` carrying the watch's ``id`` to poll
    with.  ``group_by="prefix"`` counts per task prefix, None in one group;
    ``complete`` counts the tasks done already as well.  The watch ends when
    its state is final and has been polled, on ``progress_stop``, or when
    ``client`` leaves.
    """

    op: Literal["progress_watch"]
    keys: Sequence[Key]
    group_by: Literal["prefix"] | None
    complete: bool
    client: NotRequired[str | None]


class ProgressPoll(TypedDict):
    """The current :class:`ProgressState` of watch ``id``."""

    op: Literal["progress_poll"]
    id: str


class ProgressStop(TypedDict):
    """End watch ``id`` (nothing happens when it has ended already)."""

    op: Literal["progress_stop"]
    id: str


class GetTaskStream(TypedDict):
    """Ask for the task stream's records (``Client.get_task_stream``); starts recording if it was not."""

    op: Literal["get_task_stream"]
    start: NotRequired[float | None]
    stop: NotRequired[float | None]
    count: NotRequired[int | None]


class GetProfile(TypedDict):
    """Ask for the workers' (or the scheduler's) statistical profile (``Client.profile``)."""

    op: Literal["profile"]
    key: NotRequired[str | None]
    start: NotRequired[float | None]
    stop: NotRequired[float | None]
    workers: NotRequired[Sequence[str] | None]
    merge_workers: NotRequired[bool]
    server: NotRequired[bool]
    scheduler: NotRequired[bool]


class GetProfileMetadata(TypedDict):
    """Ask for the workers' profile sample counts per cycle (merged over workers)."""

    op: Literal["profile_metadata"]
    workers: NotRequired[Sequence[str] | None]
    start: NotRequired[float]
    stop: NotRequired[float | None]


# -- client -> scheduler (stream) ------------------------------------------------
class UpdateGraph(TypedDict):
    op: Literal["update-graph"]
    client: str
    #: ``(key, task)`` pairs, not a map: msgpack interns every string map key it reads, and millions
    #: of task keys in the interpreter's table of interned strings cost memory, and a pause of most of
    #: a second each time that table doubles.
    tasks: Sequence[tuple[Key, TaskSpec]]
    keys: Sequence[Key]
    priority: NotRequired[int]
    annotations: NotRequired[Mapping[str, Any]]
    stimulus_id: NotRequired[str]
    #: A graph sent in several messages: all share ``graph``; only the last has ``final``.
    graph: NotRequired[str]
    final: NotRequired[bool]
    #: The P2P shuffles whose barrier tasks are in this graph (sent with its first part).
    shuffles: NotRequired[Sequence[ShuffleDescription]]
    #: The source of the caller's frames that made the graph, ``(code, lineno_frame, lineno_relative,
    #: filename)`` each (``distributed.diagnostics.computations.nframes``; sent with its first part).
    code: NotRequired[Sequence[tuple[str, int, int, str]]]


class ClientKeys(TypedDict):
    """``client-desires-keys`` and ``client-releases-keys``.

    ``client`` is the sender's id, or :data:`FIRE_AND_FORGET` for keys to
    compute to the end whatever becomes of their futures.
    """

    op: Literal["client-desires-keys", "client-releases-keys"]
    client: str
    keys: Sequence[Key]


#: The client id under which ``fire_and_forget`` asks for keys: the scheduler
#: wants such a key until it is done (in memory or erred), then lets it go.
FIRE_AND_FORGET: Final = "fire-and-forget"


class ClientHeartbeat(TypedDict):
    op: Literal["heartbeat-client"]
    client: NotRequired[str]


class CloseClient(TypedDict):
    op: Literal["close-client"]
    client: NotRequired[str]


class StreamBarrier(TypedDict):
    """Echoed back to the client once the scheduler has handled everything sent before it.

    ``lazy``: nobody waits on the echo (it acknowledges what the client keeps
    to send again should the stream be lost): it rides along with the next
    report instead of taking a write of its own.
    """

    op: Literal["stream-barrier"]
    client: str
    id: int
    lazy: NotRequired[bool]


# -- scheduler -> client (replies to its requests) ----------------------------------
#: The reply to ``who_has``: the workers holding each key asked for (none: not in memory).
WhoHasReply = Mapping[Key, Sequence[str]]
#: The reply to ``nthreads``: threads of each worker, by address.
NthreadsReply = Mapping[str, int]


class WorkerIdentity(TypedDict):
    """One worker, as the scheduler describes it (``identity``, ``scheduler_info``)."""

    type: Literal["Worker"]
    id: Any
    name: Any
    host: str
    nthreads: int
    memory_limit: int
    pid: int | None
    nanny: str | None
    resources: Mapping[str, float]
    local_directory: str
    last_seen: float
    metrics: Mapping[str, Any]
    status: str


class SchedulerIdentity(TypedDict):
    """The reply to ``identity`` (and ``scheduler_info``): the scheduler and its workers."""

    type: Literal["Scheduler"]
    id: str
    address: str
    #: Ports of the scheduler's services by name (``dashboard``), when running.
    services: Mapping[str, int]
    started: float
    n_workers: int
    total_threads: int
    total_memory: int
    workers: Mapping[str, WorkerIdentity]


#: The reply to ``get_task_stream``: task stream records (see ``distributed.diagnostics.task_stream``).
TaskStreamReply = Sequence[Mapping[str, Any]]

#: The reply to requests that only acknowledge (``update-data``, ``cancel-keys``, ...).
Acknowledged = Literal["OK"]


#: Where a progress watch is: waiting for the scheduler to know its keys, running, or over.
ProgressStatus = Literal["pending", "running", "finished", "error"]


class ProgressState(TypedDict):
    """A progress watch's state: tasks by group, all counted and not yet done.

    ``status`` is ``pending`` while some keys are not known to the scheduler
    yet, ``running``, then ``finished`` or ``error`` (a task erred or a key was
    cancelled: ``erred_key`` and ``exception``, the error's text).
    """

    id: str
    status: ProgressStatus
    all: Mapping[str, int]
    remaining: Mapping[str, int]
    erred_key: NotRequired[Key]
    exception: NotRequired[str]


#: Every request a client makes of the scheduler.
ClientRequest = (
    RegisterClient
    | VersionsRequest
    | DumpState
    | SetMetadata
    | GetMetadata
    | Empty
    | KeysRequest
    | OptionalKeysRequest
    | WorkersRequest
    | UpdateData
    | CancelKeys
    | RetryKeys
    | RunFunction
    | StoryRequest
    | RetireWorkers
    | Replicate
    | Rebalance
    | WaitForWorkers
    | RegisterPlugin
    | UnregisterPlugin
    | ProgressWatch
    | ProgressPoll
    | ProgressStop
    | GetTaskStream
    | GetProfile
    | GetProfileMetadata
)


# -- scheduler -> client (stream) ----------------------------------------------
class KeyInMemory(TypedDict):
    op: Literal["key-in-memory"]
    key: Key
    workers: Sequence[str]
    type: NotRequired[str | None]


class ClientTaskErred(TypedDict):
    op: Literal["task-erred"]
    key: Key
    exception: Payload
    traceback: Any
    text: str
    #: Where the exception was raised, one line (the task to blame and its worker), added to it as a note.
    where: NotRequired[str]


class StreamBarrierReached(TypedDict):
    op: Literal["stream-barrier"]
    id: int


class CancelledKeys(TypedDict):
    op: Literal["cancelled-keys"]
    keys: Sequence[Key]
    reason: NotRequired[str]


class LostData(TypedDict):
    """A key the client wants left memory with its last holder.

    If the key has a run_spec it is recomputed: the client waits for it
    again (a ``key-in-memory`` or ``task-erred`` follows).  Data without one
    (scattered) cannot come back: a ``task-erred`` with ``LostDataError``
    follows.
    """

    op: Literal["lost-data"]
    key: Key


#: Every message the scheduler sends on a client's stream.
SchedulerToClient = KeyInMemory | ClientTaskErred | StreamBarrierReached | CancelledKeys | LostData


# -- worker -> scheduler (requests) --------------------------------------------
class RegisterWorker(TypedDict):
    op: Literal["register-worker"]
    address: str
    nthreads: int
    name: Any
    memory_limit: int
    pid: NotRequired[int]
    resources: NotRequired[Mapping[str, float]]
    nanny: NotRequired[str | None]
    keys: NotRequired[Sequence[Key]]
    nbytes: NotRequired[Mapping[Key, int]]
    versions: NotRequired[Mapping[str, Any]]
    local_directory: NotRequired[str]
    #: ``Worker(startup_information=)``'s values, by name: shown in the worker's identity.
    extra: NotRequired[Mapping[str, Any]]


class HeartbeatWorker(TypedDict):
    op: Literal["heartbeat_worker"]
    address: str
    now: float
    metrics: NotRequired[WorkerMetrics | Mapping[str, Any]]
    executing: NotRequired[int]
    #: What each ``Worker(extensions=)`` extension's ``heartbeat()`` said, by name.
    extensions: NotRequired[Mapping[str, Any]]


class UnregisterWorker(TypedDict):
    op: Literal["unregister"]
    address: str
    reason: NotRequired[str]


class SpilledBytes(TypedDict):
    """Results a worker spilled to disk: their size in memory (by sizeof) and on disk."""

    memory: int
    disk: int


class TransferTotals(TypedDict):
    """Bytes (by sizeof) a worker received from and sent to other workers since it started."""

    incoming_bytes_total: int
    outgoing_bytes_total: int


class WorkerMetrics(TypedDict):
    """What a worker reports in its heartbeat.

    ``memory`` is the process's RSS; ``managed_bytes`` the results it holds (by
    sizeof, spilled ones included), ``spilled_bytes`` the part of them on disk;
    ``transfer`` the bytes exchanged with other workers so far;
    ``spill_disk_error`` (only once it happened) the error of the spill write
    that turned its spilling off.
    """

    memory: int
    cpu: float
    executing: int
    in_memory: int
    managed_bytes: int
    spilled_bytes: SpilledBytes
    transfer: NotRequired[TransferTotals]
    spill_disk_error: NotRequired[str]


# -- worker -> scheduler (stream) ----------------------------------------------
class TransferSpan(TypedDict):
    """One fetch of dependencies for a task: from which peer, when (worker clock), which keys."""

    source: str
    start: float
    stop: float
    keys: Sequence[Key]
    nbytes: int


class TaskFinished(TypedDict):
    op: Literal["task-finished"]
    key: Key
    run_id: int
    nbytes: int
    type: str
    start: float
    stop: float
    #: The fetches of this task's dependencies, sent only when there were any.
    transfers: NotRequired[Sequence[TransferSpan]]


class WorkerTaskErred(TypedDict):
    op: Literal["task-erred"]
    key: Key
    run_id: int
    exception: Payload
    traceback: Any
    text: str
    traceback_text: NotRequired[str]
    start: NotRequired[float]
    stop: NotRequired[float]
    transfers: NotRequired[Sequence[TransferSpan]]


class AddKeys(TypedDict):
    """The worker now holds replicas of these keys (fetched from peers)."""

    op: Literal["add-keys"]
    keys: Sequence[Key]
    nbytes: NotRequired[Mapping[Key, int]]


class ReleaseWorkerData(TypedDict):
    """The worker dropped these keys."""

    op: Literal["release-worker-data"]
    keys: Sequence[Key]


class MissingData(TypedDict):
    """A task could not run: no listed peer had its dependency."""

    op: Literal["missing-data"]
    key: Key
    run_id: int
    missing: Mapping[Key, Sequence[str]]


class Reschedule(TypedDict):
    op: Literal["reschedule"]
    key: Key
    run_id: int


class LongRunning(TypedDict):
    """A task seceded from its worker's thread pool."""

    op: Literal["long-running"]
    key: Key
    run_id: int


class KeepAlive(TypedDict):
    op: Literal["keep-alive"]


class StealResponse(TypedDict):
    """The worker's answer to ``steal-request``: the state ``key`` was in when it arrived.

    In state ``waiting`` or ``ready`` (not started) the worker dropped the
    task, so the scheduler runs it elsewhere; in any other state the worker
    keeps it.  ``state`` is None for a key the worker does not know.
    """

    op: Literal["steal-response"]
    key: Key
    state: str | None
    stimulus_id: str


class WorkerStatusChange(TypedDict):
    """The worker paused (its memory passed the pause threshold) or resumed: the scheduler sends
    no new tasks or replicas to a paused worker."""

    op: Literal["worker-status-change"]
    status: Literal["running", "paused"]


#: What a worker's state machine sends the scheduler on its stream.
WorkerStreamMessage = (
    TaskFinished
    | WorkerTaskErred
    | AddKeys
    | ReleaseWorkerData
    | MissingData
    | Reschedule
    | LongRunning
    | StealResponse
)


# -- scheduler -> worker (stream) ----------------------------------------------
class ComputeTask(TypedDict):
    op: Literal["compute-task"]
    key: Key
    run_id: int
    run_spec: Payload | None
    priority: Sequence[Any]
    who_has: Mapping[Key, Sequence[str]]
    nbytes: Mapping[Key, int]
    duration: float
    resources: NotRequired[Mapping[str, float] | None]
    annotations: NotRequired[Mapping[str, Any] | None]
    #: Keep the result as an actor (in ``Worker.actors``), not as data.
    actor: NotRequired[bool]


class FreeKeys(TypedDict):
    op: Literal["free-keys"]
    keys: Sequence[Key]
    stimulus_id: NotRequired[str]


class CloseWorker(TypedDict):
    op: Literal["close-worker"]
    reason: NotRequired[str]


class AcquireReplicas(TypedDict):
    """Fetch copies of these keys from the workers named.

    A retiring worker asks its peers (a request); the scheduler asks on the
    worker's stream (replicate, rebalance), so that it follows any
    ``free-keys`` sent before it.
    """

    op: Literal["acquire-replicas"]
    who_has: Mapping[Key, Sequence[str]]
    nbytes: Mapping[Key, int]


class StealRequest(TypedDict):
    """Give ``key`` up unless it started (work stealing); answered by ``steal-response``."""

    op: Literal["steal-request"]
    key: Key
    stimulus_id: str


#: Every message the scheduler sends on a worker's stream.
SchedulerToWorker = ComputeTask | FreeKeys | CloseWorker | AcquireReplicas | StealRequest


# -- worker requests (from peers, clients, the scheduler) -----------------------
class GetData(TypedDict):
    """Ask a worker for the values it holds of ``keys``.

    With ``busy_ok`` (a peer worker asking) the worker may answer
    :class:`GetDataBusy` instead, when it serves ``distributed.worker.connections.incoming``
    such requests already; the peer tries again later.
    """

    op: Literal["get_data"]
    keys: Sequence[Key]
    who: NotRequired[str | None]
    busy_ok: NotRequired[bool]


class RelayGetData(TypedDict):
    """Fetch ``keys`` from the scheduler's ``worker`` for a client that does not connect to workers."""

    op: str
    worker: str
    keys: Sequence[Key]


class RelayUpdateData(TypedDict):
    """Put ``data`` on the scheduler's ``worker`` for a client that does not connect to workers."""

    op: str
    worker: str
    data: Mapping[Key, Payload]


class RelayReply(TypedDict):
    """The scheduler's answer to a relay: the worker's reply, or why the worker could not be reached."""

    status: Literal["OK", "unreachable"]
    reply: NotRequired[Any]
    error: NotRequired[str]


class WorkerUpdateData(TypedDict):
    """Data pushed to a worker (scatter)."""

    op: Literal["update_data"]
    data: Mapping[Key, Payload]
    report: NotRequired[bool]


class WorkerClose(TypedDict):
    op: Literal["close"]
    reason: NotRequired[str]


class WorkerProfile(TypedDict):
    """Ask a worker for its profile between ``start`` and ``stop``, of a key prefix or its event loop."""

    op: Literal["profile"]
    start: NotRequired[float | None]
    stop: NotRequired[float | None]
    key: NotRequired[str | None]
    server: NotRequired[bool]


class WorkerProfileMetadata(TypedDict):
    """Ask a worker for its profile sample counts per cycle."""

    op: Literal["profile_metadata"]
    start: NotRequired[float]
    stop: NotRequired[float | None]


# -- worker -> worker (and replies of worker requests) ----------------------------
class GetDataBusy(TypedDict):
    """A worker's answer to ``get_data`` when it serves as many peers as it may: ask again later."""

    status: Literal["busy"]


class GetDataReply(TypedDict):
    """A worker's answer to ``get_data``: the values it holds of the keys asked for."""

    status: Literal["OK"]
    data: Mapping[Key, Payload]
    nbytes: Mapping[Key, int]


class UpdateDataReply(TypedDict):
    """A worker's answer to ``update_data``: sizes and type names of what it stored."""

    nbytes: Mapping[Key, int]
    types: Mapping[Key, str]


# -- worker plugins: client -> scheduler (requests), scheduler -> worker (requests) -------------
class RegisterWorkerPlugin(TypedDict):
    """Set a plugin up on every worker, now and on each worker that joins later."""

    op: Literal["register_worker_plugin"]
    plugin: Payload
    name: str
    idempotent: NotRequired[bool]


class UnregisterWorkerPlugin(TypedDict):
    op: Literal["unregister_worker_plugin"]
    name: str


class PluginAdd(TypedDict):
    """Scheduler -> worker: set this plugin up."""

    op: Literal["plugin-add"]
    plugin: Payload
    name: str


class PluginRemove(TypedDict):
    """Scheduler -> worker: tear this plugin down."""

    op: Literal["plugin-remove"]
    name: str


# -- published datasets: client -> scheduler (requests) ----------------------------
class PublishPut(TypedDict):
    """Publish ``data`` (opaque to the scheduler) as ``name``, keeping the tasks of ``keys`` in memory.

    Refused when ``name`` is taken, unless ``override``.
    """

    op: Literal["publish_put"]
    name: PrimitiveName
    keys: Sequence[Key]
    data: Payload
    override: bool
    client: NotRequired[str | None]


class PublishGet(TypedDict):
    """The dataset ``name``; its keys are wanted by ``client`` (the getter) from then on."""

    op: Literal["publish_get"]
    name: PrimitiveName
    client: NotRequired[str | None]


class PublishGetReply(TypedDict):
    """A published dataset (no ``data`` when there is none of that name)."""

    data: NotRequired[Payload]


class PublishDelete(TypedDict):
    op: Literal["publish_delete"]
    name: PrimitiveName


class PublishList(TypedDict):
    op: Literal["publish_list"]


#: Every request a client sends about published datasets.
DatasetRequest = PublishPut | PublishGet | PublishDelete | PublishList


# -- events and topics: client -> scheduler (requests) --------------------------------
class LogEvent(TypedDict):
    """Record ``msg`` (msgpack-able) under ``topic`` (or each of several topics)."""

    op: Literal["log_event"]
    topic: str | Sequence[str]
    msg: Any


class GetEvents(TypedDict):
    """The events of ``topic`` as ``(time, msg)`` pairs; of every topic, by topic, when None."""

    op: Literal["events"]
    topic: NotRequired[str | None]


#: Every request a client sends about events.
EventLogRequest = LogEvent | GetEvents


# -- events and topics: client -> scheduler (stream) ----------------------------------
class TopicSubscription(TypedDict):
    """Start or stop sending ``client`` the events of ``topic`` as they are logged."""

    op: Literal["subscribe-topic", "unsubscribe-topic"]
    topic: str
    client: str


# -- events and topics: worker -> scheduler (stream) ----------------------------------
class WorkerLogEvent(TypedDict):
    """Record ``msg`` under ``topic``; a dict ``msg`` gets the ``worker`` it came from."""

    op: Literal["log-event"]
    topic: str | Sequence[str]
    msg: Any
    worker: str


class PrintEvent(TypedDict, total=False):
    """``distributed.print`` in a task: the event of topic ``print`` its clients print.

    ``file`` is 1 for ``sys.stdout``, 2 for ``sys.stderr`` (absent: the default).
    """

    args: Sequence[str]
    sep: str | None
    end: str | None
    flush: bool
    file: int
    worker: str


class WarnEvent(TypedDict, total=False):
    """``distributed.warn`` in a task: the event of topic ``warn`` its clients warn with.

    ``category`` is the warning class's import path, e.g. ``"builtins.UserWarning"``.
    """

    message: str
    category: str
    worker: str


# -- events and topics: scheduler -> client (stream) ----------------------------------
class TopicEvent(TypedDict):
    """An event of a topic the client subscribed to: ``event`` is ``(time, msg)``."""

    op: Literal["event"]
    topic: str
    event: Sequence[Any]


# -- logs (clusters and clients -> any server) ------------------------------------
class GetLogs(TypedDict):
    """Ask a server for the log records it kept (the last ``n``; all when None)."""

    op: Literal["get_logs"]
    n: NotRequired[int | None]
    timestamps: NotRequired[bool]


# -- restarts: client -> scheduler (requests), scheduler -> nanny (requests) -------
class Restart(TypedDict):
    """Replace every worker process through its nanny; every future is cancelled."""

    op: Literal["restart"]
    timeout: NotRequired[float | None]
    wait_for_workers: NotRequired[bool]


class RestartWorkers(TypedDict):
    """Replace the processes of these workers (addresses or names) through their nannies."""

    op: Literal["restart_workers"]
    workers: Sequence[str]
    timeout: NotRequired[float | None]


class NannyRestart(TypedDict):
    """Ask a nanny for a new worker process (the old one is closed, then killed)."""

    op: Literal["restart"]
    timeout: NotRequired[float]
    reason: NotRequired[str]
    wait: NotRequired[bool]
    #: Only if the nanny's worker is still the one at this address (else nothing is done).
    worker: NotRequired[str]


class NannyKill(TypedDict):
    """Ask a nanny to end its worker process and not start another."""

    op: Literal["kill"]
    timeout: NotRequired[float]
    reason: NotRequired[str]


# -- nanny plugins and nanny requests: client -> scheduler, nanny -> scheduler, scheduler/worker -> nanny ----
class RegisterNannyPlugin(TypedDict):
    """Set a plugin up on every nanny, now and on each nanny that starts later."""

    op: Literal["register_nanny_plugin"]
    plugin: Payload
    name: str
    idempotent: NotRequired[bool]


class UnregisterNannyPlugin(TypedDict):
    op: Literal["unregister_nanny_plugin"]
    name: str


class RegisterNanny(TypedDict):
    """A starting nanny asks for the nanny plugins registered so far (reply: name -> plugin)."""

    op: Literal["register_nanny"]
    address: str


class NannyPluginAdd(TypedDict):
    """Scheduler -> nanny: set this plugin up (restarting the worker for ``restart = True`` plugins)."""

    op: Literal["plugin-add"]
    plugin: Payload
    name: str


class NannyPluginRemove(TypedDict):
    """Scheduler -> nanny: tear this plugin down."""

    op: Literal["plugin-remove"]
    name: str


class NannyCloseGracefully(TypedDict):
    """Worker -> its nanny: the worker is closing on purpose; close too rather than start another."""

    op: Literal["close_gracefully"]
    reason: NotRequired[str]


# -- actors: an actor's proxy (in a client or a task) -> the actor's worker (requests) ---
class ActorExecute(TypedDict):
    """Call method ``function`` of the actor ``key`` with ``args``/``kwargs``; the reply is its result."""

    op: Literal["actor_execute"]
    key: Key
    function: str
    args: Payload
    kwargs: Payload
    #: False: run a plain method on the worker's event loop, not in the actor thread.
    separate_thread: NotRequired[bool]


class ActorAttribute(TypedDict):
    """Read attribute ``attribute`` of the actor ``key``; the reply is its value."""

    op: Literal["actor_attribute"]
    key: Key
    attribute: str


# -- P2P shuffle: client -> scheduler (inside update-graph), worker -> scheduler (requests),
# -- scheduler -> worker (requests), worker -> worker (requests) ---------------------------------
class ShuffleDescription(TypedDict):
    """What the scheduler learns of one P2P shuffle in a graph (the client reads it off the barrier task)."""

    id: str
    #: The key of the shuffle's barrier task.
    barrier: Key
    #: How many output partitions there are.
    npartitions: int
    #: ``[key, position]`` of each unpack task: the position of the output partition it reads.
    outputs: Sequence[Sequence[Any]]
    disk: bool
    #: How output partitions are spread over the workers: ``"round-robin"`` (partition
    #: ``i`` to worker ``i % n``) or ``"contiguous"`` (blocks: ``i * n // npartitions``).
    assignment: Literal["round-robin", "contiguous"]
    #: The pickled spec: the scheduler passes it on to workers without opening it.
    spec: bytes


class ShuffleGetOrCreate(TypedDict):
    """A transfer task asks for the current run of a shuffle, which starts one if there is none."""

    op: Literal["shuffle_get_or_create"]
    id: str
    worker: str


class ShuffleGet(TypedDict):
    """A worker asks for the current run of a shuffle (None when none runs)."""

    op: Literal["shuffle_get"]
    id: str


class ShuffleRunInfo(TypedDict):
    """One run of a shuffle, as the scheduler tells workers."""

    id: str
    run_id: int
    #: The worker owning each output partition, by position.
    worker_for: Sequence[str]
    #: The pickled spec, as the client sent it.
    spec: bytes


class ShuffleBarrierRequest(TypedDict):
    """The barrier task of a shuffle runs on ``worker``: every transfer is done, in these runs."""

    op: Literal["shuffle_barrier"]
    id: str
    #: The distinct run ids the transfer tasks returned (one, the current run's, when all is well).
    run_ids: Sequence[int]
    worker: str


class ShuffleInputsDone(TypedDict):
    """Scheduler to participating worker: no more shards will come for this run."""

    op: Literal["shuffle_inputs_done"]
    id: str
    run_id: int


class ShuffleForget(TypedDict):
    """Scheduler to worker: drop this shuffle's runs up to ``run_id`` and their files."""

    op: Literal["shuffle_forget"]
    id: str
    run_id: int


class ShuffleReceive(TypedDict):
    """Worker to worker: shards ``[input partition, output partition, bytes]`` of one run."""

    op: Literal["shuffle_receive"]
    id: str
    run_id: int
    shards: Sequence[Sequence[Any]]
