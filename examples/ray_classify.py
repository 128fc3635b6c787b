"""Classify every image file under INPUT_DIR on Ray Data, one JSON object per file in OUTPUT.jsonl.

    python examples/ray_classify.py scans/ predictions.jsonl              # a local Ray on this machine
    RAY_ADDRESS=ray://head:10001 python examples/ray_classify.py ...      # an existing cluster
    ray job submit --working-dir . -- python examples/ray_classify.py s3://bucket/scans out.jsonl

Each line: {"path": ..., "digit": 7, "confidence": 0.998, "error": ""}; a file that could not be
classified has digit -1, confidence null and its error. The output file is written whole or
not at all (a temporary file renamed at the end).
"""

import json
import math
import os
import sys
import tempfile

import ray

import lenet.ray


def main(argv: list) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    source, output = argv
    ray.init()  # RAY_ADDRESS, when set, names the cluster to join
    rows = lenet.ray.classify(source).iter_rows()
    folder = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(prefix=".ray_classify-", suffix=".jsonl", dir=folder)
    n = failed = 0
    try:
        with os.fdopen(fd, "w") as f:
            for row in rows:
                confidence = float(row["confidence"])
                f.write(
                    json.dumps(
                        {
                            "path": row["path"],
                            "digit": int(row["digit"]),
                            "confidence": None if math.isnan(confidence) else round(confidence, 6),
                            "error": row["error"],
                        }
                    )
                    + "\n"
                )
                n += 1
                failed += bool(row["error"])
        os.replace(tmp, output)
    except BaseException:
        os.unlink(tmp)
        raise
    print(f"{n} files, {failed} not classified -> {output}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
