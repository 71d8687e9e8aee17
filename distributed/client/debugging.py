"""What a client offers for looking into a cluster: running functions on workers, where tasks are
(``call_stack``), the whole state in one file (``dump_cluster_state``), versions, and metadata.

:class:`ClientDebugging` sits between :class:`~distributed.client.base.ClientBase`
and :class:`~distributed.Client`; users call these as methods of ``Client``.
"""

from __future__ import annotations

import asyncio
import functools
import warnings
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal, cast

from dask.typing import no_default

from distributed.client.base import AsyncT, ClientBase
from distributed.client.dual import Work, dual_method
from distributed.client.graphs import worker_list
from distributed.cluster_dump import worker_state, write_cluster_dump
from distributed.core import rebuild_exception
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.serialize import Serialize, unwrap
from distributed.utils import unsupported
from distributed.versions import VersionMismatchWarning, get_versions
from distributed.versions import error_message as version_mismatch

__all__ = ["ClientDebugging"]


class ClientDebugging(ClientBase[AsyncT]):
    """The client's tools for looking into the cluster (see the module docstring)."""

    async def _run(
        self,
        function: Callable[..., Any],
        *args: Any,
        workers: Any = None,
        wait: bool = True,
        nanny: bool = False,
        on_error: str = "raise",
        **kwargs: Any,
    ) -> Any:
        response = await self.link.request(
            m.RunFunction(
                op="broadcast",
                function=Serialize(function),
                args=Serialize(args),
                kwargs=Serialize(kwargs),
                workers=worker_list(workers),
                wait=wait,
                nanny=nanny,
            )
        )
        results: dict[str, Any] = {}
        for addr, resp in response.items():
            if resp.get("status") == "OK":
                results[addr] = unwrap(resp.get("result"))
            else:
                exc = rebuild_exception(resp)
                if on_error == "raise":
                    raise exc
                if on_error == "return":
                    results[addr] = exc
        return results if wait else None

    @dual_method
    def set_metadata(self, key: Any, value: Any) -> Work[None]:
        """Put ``value`` (plain msgpack data) in the scheduler's metadata at ``key``.

        ``key`` may be a list, a path into nested dicts (made where missing):
        ``set_metadata(["a", "b"], 1)`` then ``get_metadata("a")`` gives ``{"b": 1}``.

        Raises
        ------
        TypeError
            When ``value`` is not plain msgpack data.
        """
        from distributed.protocol.framing import is_msgpack_serializable

        if not is_msgpack_serializable(value):
            raise TypeError(f"Metadata must be msgpack serializable. Got {type(value)=} instead.")
        path = list(key) if isinstance(key, list) else [key]
        return functools.partial(self.link.request, m.SetMetadata(op="set_metadata", keys=path, value=value))

    @dual_method
    def get_metadata(self, key: Any, default: Any = no_default) -> Work[Any]:
        """The scheduler's metadata at ``key`` (a key or a list, a path); ``default`` when there is none.

        Raises
        ------
        KeyError
            When there is nothing at ``key`` and no ``default``.
        """
        path = list(key) if isinstance(key, list) else [key]

        async def get() -> Any:
            reply = await self.link.request(m.GetMetadata(op="get_metadata", keys=path))
            if "value" in reply:
                return reply["value"]
            if default is no_default:
                raise KeyError(key)
            return default

        return get

    @dual_method
    def dump_cluster_state(
        self,
        filename: str = "dask-cluster-dump",
        write_from_scheduler: bool | None = None,
        exclude: Collection[str] = (),
        format: Literal["msgpack", "yaml"] = "msgpack",
    ) -> Work[str]:
        """Write the state of the scheduler and of every worker to one file, for debugging.

        Read it back with :func:`distributed.cluster_dump.load_cluster_dump`.

        Parameters
        ----------
        filename
            The file's name without its suffix (``.msgpack.gz`` or ``.yaml`` is added).
        write_from_scheduler
            Refused when True: this client writes the file, where it runs.
        exclude
            Fields of the task records to leave out (``"run_spec"``, say).
        format
            ``"msgpack"`` (gzipped) or ``"yaml"``.

        Returns
        -------
        The path written.
        """
        if write_from_scheduler:
            raise unsupported("Client.dump_cluster_state", "write_from_scheduler", "the client writes the file")
        if format not in ("msgpack", "yaml"):
            raise ValueError(f"dump_cluster_state(format={format!r}): 'msgpack' or 'yaml'")
        left_out = list(exclude)

        async def dump() -> str:
            scheduler = await self.link.request(m.DumpState(op="dump_state", exclude=left_out))
            workers = await self._run(worker_state, exclude=left_out, on_error="return")
            state = {
                "scheduler": scheduler,
                "workers": {a: w if isinstance(w, dict) else repr(w) for a, w in workers.items()},
                "versions": await self.get_versions(asynchronous=True),
            }
            return await asyncio.to_thread(write_cluster_dump, state, filename, format)

        return dump

    def recreate_task_locally(self, future: Any) -> Any:
        """Run ``future``'s task in this process, with its inputs fetched from the cluster; its result.

        For a look at a task with a debugger or a profiler: the task's own
        function runs in the calling thread (the scheduler's copy of the task,
        as the client sent it), on its inputs as the cluster holds them (or
        computes them again).  On an asynchronous client, an awaitable that
        runs it on the event loop.
        """
        key = _single_key(future)
        if self.asynchronous:
            return self._run_here(key)
        # A synchronous client: sync() gives the value (its declared type covers both forms).
        node, inputs = cast("tuple[Any, dict[Key, Any]]", self.sync(self._task_and_inputs, key))
        return node(inputs)

    def recreate_error_locally(self, future: Any) -> Any:
        """Run the task that caused ``future``'s error in this process, so that it raises here.

        The task to blame is the erred one itself or the dependency whose error
        it carries.  Under ``pdb`` (``%debug`` in IPython) the post-mortem then
        stops in the user's function.  ``future`` may be a collection holding
        futures; the first erred one is used.  On an asynchronous client, an
        awaitable.

        Raises
        ------
        ValueError
            When none of the futures erred.
        """
        from distributed.client.waiting import futures_of

        keys = [f.key for f in futures_of(future)]

        async def cause() -> Key:
            key: Key | None = await self.link.request(m.KeysRequest(op="get_error_cause", keys=keys))
            if key is None:
                raise ValueError("No erred futures passed")
            return key

        if self.asynchronous:

            async def run() -> Any:
                return await self._run_here(await cause())

            return run()
        # A synchronous client: sync() gives the values (its declared type covers both forms).
        blamed = cast("Key", self.sync(cause))
        node, inputs = cast("tuple[Any, dict[Key, Any]]", self.sync(self._task_and_inputs, blamed))
        return node(inputs)

    async def _run_here(self, key: Key) -> Any:
        node, inputs = await self._task_and_inputs(key)
        return node(inputs)

    async def _task_and_inputs(self, key: Key) -> tuple[Any, dict[Key, Any]]:
        """The task of ``key`` as the client sent it (unpickled here), and its inputs' values by key."""
        from distributed.client.future import Future

        # The task may have just been submitted: its graph is on the stream, which a request could overtake.
        await self.link.stream_handled()
        reply: m.RunSpecReply = await self.link.request(m.KeyRequest(op="get_runspec", key=key))
        if reply["run_spec"] is None:
            raise ValueError(f"{key!r} was not computed by a task (scattered data has no task to run again)")
        deps = list(reply["dependencies"])
        inputs = await self.transfer.gather([Future(k, self._whole()) for k in deps]) if deps else []
        return unwrap(reply["run_spec"]), dict(zip(deps, inputs))

    @dual_method
    def call_stack(
        self, futures: Any = None, keys: Collection[Key] | None = None
    ) -> Work[dict[str, dict[Key, list[str]]]]:
        """Where the running tasks are in their code: ``{worker: {key: call stack lines}}``.

        Parameters
        ----------
        futures, keys
            Only these tasks (default: every running task); the workers asked
            are those the scheduler says are running them.
        """
        from distributed.client.waiting import futures_of
        from distributed.diagnostics.call_stack import task_call_stacks

        wanted: list[Key] | None = None
        if futures is not None or keys is not None:
            wanted = [f.key for f in futures_of(futures)] if futures is not None else []
            wanted += list(keys or ())

        async def stacks() -> dict[str, dict[Key, list[str]]]:
            workers = None
            if wanted is not None:
                processing = await self.link.request(m.WorkersRequest(op="processing", workers=None))
                workers = [w for w, ks in processing.items() if set(ks) & set(wanted)]
                if not workers:
                    return {}
            found = await self._run(task_call_stacks, keys=wanted, workers=workers)
            return {w: dict(s) for w, s in found.items() if s}

        return stacks

    @dual_method
    def get_versions(self, check: bool = False, packages: Sequence[str] | None = None) -> Work[dict[str, Any]]:
        """Versions of Python and the packages that must agree, here, on the scheduler and on each worker.

        Parameters
        ----------
        check
            Compare them: a required package (python, dask, distributed,
            msgpack, cloudpickle) in different versions raises; any other
            difference warns (``VersionMismatchWarning``).
        packages
            More packages to report, asked of the scheduler and each worker.

        Returns
        -------
        ``{"client": ..., "scheduler": ..., "workers": {address: ...}}``, each
        ``{"host": ..., "packages": ...}``.

        Raises
        ------
        ValueError
            With ``check=True``, when a required package differs (the message has the table).
        """
        names = list(packages) if packages is not None else None

        async def versions() -> dict[str, Any]:
            reply = await self.link.request(m.VersionsRequest(op="versions", packages=names))
            result = {"client": get_versions(names), "scheduler": reply["scheduler"], "workers": dict(reply["workers"])}
            if check:
                found = version_mismatch(result["scheduler"], result["workers"], result["client"])
                if found["error"]:
                    raise ValueError(found["error"])
                if found["warning"]:
                    warnings.warn(VersionMismatchWarning(found["warning"]), stacklevel=2)
            return result

        return versions

    @dual_method
    def benchmark_hardware(self, duration: float = 1.0) -> Work[dict[str, dict[str, float]]]:
        """Measure the workers' memory, disk and network bandwidths, as dask's ``Client.benchmark_hardware``.

        Every worker copies blocks in memory and writes and reads them back
        on its disk; pairs of workers send blocks to each other (one worker
        alone measures no network).

        Parameters
        ----------
        duration
            Seconds each measure takes per block size (five sizes each).

        Returns
        -------
        ``{"disk": {size: bytes_per_second}, "memory": {...}, "network": {...}}``,
        the mean over the workers, keyed by block size (``"1 MiB"``).
        """

        async def measure() -> dict[str, dict[str, float]]:
            result: dict[str, dict[str, float]] = await self.link.request(
                m.BenchmarkHardware(op="benchmark_hardware", duration=duration)
            )
            return result

        return measure


def _single_key(future: Any) -> Key:
    """The key of ``future`` (a Future, or a collection holding exactly one).

    Raises
    ------
    ValueError
        When ``future`` holds no future or more than one.
    """
    from distributed.client.waiting import futures_of

    found = futures_of(future)
    if len(found) != 1:
        raise ValueError(f"Expected one future, found {len(found)}")
    return found[0].key
