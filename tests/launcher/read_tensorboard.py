#!/usr/bin/env python3
"""Reads a directory's TensorBoard event files with TensorBoard's own loader
(the EventAccumulator its scalar dashboard uses) and prints, as JSON, every
scalar tag's (step, value) pairs and the file version each file declares.

    read_tensorboard.py DIR

Exits 3 where TensorBoard is not installed (tools/setup.sh installs it into
/opt/trellis/venv), 1 where the files do not read.
"""
import json
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator, event_file_loader
except ImportError as e:
    print(f"TensorBoard is not installed: {e}", file=sys.stderr)
    sys.exit(3)


def main():
    d = sys.argv[1]
    ea = event_accumulator.EventAccumulator(d, size_guidance={event_accumulator.SCALARS: 0})
    ea.Reload()
    out = {"scalars": {t: [[e.step, e.value] for e in ea.Scalars(t)]
                       for t in ea.Tags()["scalars"]},
           "versions": []}
    import glob
    import os
    for path in sorted(glob.glob(os.path.join(d, "*tfevents*"))):
        for ev in event_file_loader.RawEventFileLoader(path).Load():
            from tensorboard.compat.proto import event_pb2
            e = event_pb2.Event.FromString(ev)
            if e.HasField("file_version"):
                out["versions"].append(e.file_version)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
