"""zarr-python calling its codecs directly, with no thread hop: the baseline
of zarr-python issue #4293 ("to_thread is slow").

DirectCodecPipeline is zarr-python 3.4's FusedCodecPipeline with its one
`asyncio.to_thread` per batch taken out: a read or write whose store has
synchronous I/O (LocalStore, MemoryStore) runs the pipeline's own
`read_sync` / `write_sync` on the event loop's thread, one chunk after the
other. That is the least a zarr-python read can cost, and what stalls every
other coroutine on the loop meanwhile; perf/peers shows it as a baseline,
never as a peer. Other stores take FusedCodecPipeline's path.
"""
from zarr.abc.store import SyncByteGetter, SyncByteSetter, _store_supports_sync_io
from zarr.core.codec_pipeline import FusedCodecPipeline
from zarr.registry import register_pipeline
from zarr.storage._common import StorePath


def _sync_io(first, protocol):
    if isinstance(first, StorePath):
        return _store_supports_sync_io(first.store)
    return isinstance(first, protocol)


class DirectCodecPipeline(FusedCodecPipeline):
    async def read(self, batch_info, out, drop_axes=()):
        batch = list(batch_info)
        if batch and self.sync_transform is not None and _sync_io(batch[0][0], SyncByteGetter):
            return self.read_sync(batch, out, drop_axes, max_workers=1)
        return await super().read(batch, out, drop_axes)

    async def write(self, batch_info, value, drop_axes=()):
        batch = list(batch_info)
        if batch and self.sync_transform is not None and _sync_io(batch[0][0], SyncByteSetter):
            self.write_sync(batch, value, drop_axes, max_workers=1)
            return
        await super().write(batch, value, drop_axes)


register_pipeline(DirectCodecPipeline)
