"""Wrong results on demand: with this directory on PYTHONPATH, rank 1 of a torchrun launch adds
1 to the first element of every all_reduce it takes part in, after the real call, as a flipped
bit in a link's payload would leave it. A real fabric cannot be made to corrupt data when a test
asks; the ranks, the gloo calls and the output check are otherwise real. Python imports
`sitecustomize` at start-up from the first directory on sys.path that holds one (the `site`
module's documentation, docs.python.org/3/library/site.html); RANK is torchrun's, so bench's own
process, which has none, is untouched."""

import os

if os.environ.get("RANK") == "1":
    import torch.distributed as dist

    _real_all_reduce = dist.all_reduce

    def _all_reduce(tensor, *args, **kwargs):
        work = _real_all_reduce(tensor, *args, **kwargs)
        tensor.view(-1)[:1] += 1
        return work

    dist.all_reduce = _all_reduce
