"""lenet-cli end to end, through a subprocess."""

import json
import re
import subprocess
import sys

import cv2
import numpy as np
import pytest
from conftest import REPO

EXAMPLES = sorted((REPO / "examples").glob("digit-*.png"))


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "lenet.cli", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_examples_are_there():
    assert len(EXAMPLES) == 10


def test_classifies_the_examples_in_one_call():
    out = cli("--device", "cpu", *EXAMPLES)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 10
    for path, line in zip(EXAMPLES, lines):
        m = re.fullmatch(r"(.+): (\d) \((\d+\.\d)%\)", line)
        assert m, line
        assert m.group(1) == str(path)
        assert int(m.group(2)) == int(path.stem[-1])


def test_json_and_top_k():
    out = cli("--json", "--top-k", "3", "--device", "cpu", EXAMPLES[7])
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout)
    assert rec["digit"] == 7 and len(rec["top"]) == 3 and len(rec["probabilities"]) == 10
    assert rec["top"][0]["digit"] == 7
    assert abs(sum(rec["probabilities"]) - 1) < 1e-4


def test_unsure_below(tmp_path):
    # An ambiguous image (half a 1, half a 7, blended): below the threshold it is
    # "unsure", in text and JSON; a clear example is not; with --digits, '?'.
    one, seven = (cv2.imread(str(EXAMPLES[d]), cv2.IMREAD_GRAYSCALE).astype(np.float32) for d in (1, 7))
    blend = tmp_path / "blend.png"
    cv2.imwrite(str(blend), (0.5 * one + 0.5 * seven).astype(np.uint8))
    probe = json.loads(cli("--json", "--device", "cpu", blend).stdout)
    clear = json.loads(cli("--json", "--device", "cpu", EXAMPLES[3]).stdout)
    assert probe["confidence"] < clear["confidence"]
    # Between the two (lenet5 of issue 34, which learnt European 1s, is 99.4% sure of the blend).
    threshold = (probe["confidence"] + clear["confidence"]) / 2
    out = cli("--unsure-below", threshold, "--device", "cpu", blend, EXAMPLES[3])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert re.fullmatch(rf".+blend\.png: unsure \(perhaps {probe['digit']}, \d+\.\d%\)", lines[0]), lines[0]
    assert re.fullmatch(r".+digit-3\.png: 3 \(\d+\.\d%\)", lines[1]), lines[1]
    recs = [
        json.loads(line)
        for line in cli(
            "--json", "--unsure-below", threshold, "--device", "cpu", blend, EXAMPLES[3]
        ).stdout.splitlines()
    ]
    assert [r["unsure"] for r in recs] == [True, False]
    assert "unsure" not in probe  # only when asked
    number = cli("--digits", "--unsure-below", 1.0, "--device", "cpu", EXAMPLES[3])
    assert number.returncode == 0 and ": ? (" in number.stdout, number.stdout + number.stderr
    bad = cli("--unsure-below", 1.5, EXAMPLES[3])
    assert bad.returncode != 0 and "--unsure-below must be between 0 and 1" in bad.stderr


def test_bad_files_are_reported_and_the_rest_classified(tmp_path):
    missing = tmp_path / "missing.png"
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    out = cli("--device", "cpu", EXAMPLES[3], missing, text, EXAMPLES[5])
    assert out.returncode == 1
    assert [l.split(":")[0] for l in out.stdout.strip().splitlines()] == [str(EXAMPLES[3]), str(EXAMPLES[5])]
    errors = out.stderr.strip().splitlines()
    assert len(errors) == 2
    assert "missing.png" in errors[0] and "no such file" in errors[0]
    assert "notes.png" in errors[1]


def test_weights_option_and_bad_weights(tmp_path):
    out = cli("--weights", "lenet-tf", "--device", "cpu", EXAMPLES[0])
    assert out.returncode == 0 and out.stdout.startswith(str(EXAMPLES[0]))
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"garbage")
    out = cli("--weights", bad, EXAMPLES[0])
    assert out.returncode == 2 and "bad.h5" in out.stderr


def test_precision_option():
    # Issue 74: exact by default; --precision fast runs the CPU's Winograd in float32 and the
    # summary says so, with what it costs.
    out = cli("--weights", "lenet-tf", "--device", "cpu", "--summary", EXAMPLES[7])
    assert out.returncode == 0 and "precision=exact" in out.stdout and out.stdout.rstrip().endswith("7 (100.0%)")
    out = cli("--weights", "lenet-tf", "--device", "cpu", "--precision", "fast", "--summary", EXAMPLES[7])
    assert out.returncode == 0 and "precision=fast" in out.stdout and "float64" in out.stdout
    assert out.stdout.rstrip().endswith("7 (100.0%)")
    out = cli("--precision", "half", EXAMPLES[7])
    assert out.returncode == 2 and "--precision" in out.stderr


def test_usage_errors():
    assert cli().returncode == 2
    assert cli("--device", "tpu", "x.png").returncode == 2
    out = cli("--help")
    assert out.returncode == 0 and "--weights" in out.stdout and "--top-k" in out.stdout


def test_version_reports_backends():
    out = cli("--version")
    assert out.returncode == 0
    assert "version:" in out.stdout and "backends_built" in out.stdout


def test_non_mnist_sized_png(tmp_path):
    img = cv2.imread(str(EXAMPLES[2]), cv2.IMREAD_GRAYSCALE)
    path = tmp_path / "big.png"
    cv2.imwrite(str(path), cv2.resize(img, (84, 84), interpolation=cv2.INTER_CUBIC))
    out = cli("--device", "cpu", path)
    assert out.returncode == 0 and out.stdout.strip().endswith(")")
    assert ": 2 (" in out.stdout


# --- The streaming CLI: inputs (directories, globs, stdin, --files-from), --output, streaming,
# signals, progress bar, -q. ---------------------------------------------------------------

import os
import queue
import select
import shutil
import signal
import threading

RESULT_LINE = re.compile(r"(.+): (\d) \((\d+\.\d)%\)")


def run_cli(*args, input=None, cwd=None, module="lenet.cli"):
    """Like cli(), with bytes in and out (stdin bytes, paths that need not be UTF-8)."""
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)], input=input, capture_output=True, timeout=120, cwd=cwd
    )


def copy_example(digit, path):
    """examples/digit-<digit>.png copied to `path` (any name: the content is a PNG)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(EXAMPLES[digit], path)
    return path


def results(stdout):
    """[(path, digit)] of the result lines of a run's stdout (str or bytes)."""
    if isinstance(stdout, bytes):
        stdout = stdout.decode()
    out = []
    for line in stdout.splitlines():
        m = RESULT_LINE.fullmatch(line)
        assert m, line
        out.append((m.group(1), int(m.group(2))))
    return out


def part_files(directory):
    return [p.name for p in directory.iterdir() if p.name.endswith(".part")]


def _default_sigint():  # the child gets Python's Ctrl-C handling even if our SIGINT is ignored
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Running:
    """lenet-cli in a subprocess, fed `data` on stdin by a thread that keeps stdin open
    until ``close_stdin()``, its stdout read line by line by another thread (so that
    neither pipe can fill up and block it), its stderr in a file."""

    def __init__(self, args, data: bytes, tmp_path, cwd=None):
        self.stderr_file = open(tmp_path / "cli-stderr.txt", "w+b")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lenet.cli", *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr_file,
            cwd=cwd,
            preexec_fn=_default_sigint,
        )
        self.lines: queue.Queue = queue.Queue()
        self.stdin_closed = threading.Event()
        self._close = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._feeder = threading.Thread(target=self._feed, args=(data,), daemon=True)
        self._reader.start()
        self._feeder.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _feed(self, data):
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except OSError:  # the process is gone (killed by the test)
            pass
        self._close.wait()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.stdin_closed.set()

    def next_line(self, timeout=60):
        """The next stdout line (None at EOF); fails the test if none comes in `timeout` s
        (a guard against a hang, not a measure of speed)."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no line on stdout after {timeout} s")

    def close_stdin(self):
        self._close.set()

    def finish(self, timeout=60):
        """(exit status, the rest of stdout as lines, stderr) once the process ended."""
        self.close_stdin()
        rc = self.proc.wait(timeout)
        self._reader.join(timeout)
        rest = []
        while True:
            line = self.lines.get(timeout=timeout)
            if line is None:
                break
            rest.append(line)
        self.stderr_file.seek(0)
        return rc, rest, self.stderr_file.read().decode()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.close_stdin()
        self.proc.wait(60)
        self.stderr_file.close()


@pytest.fixture
def running(tmp_path):
    started = []

    def start(args, data, cwd=None):
        r = Running(args, data, tmp_path, cwd)
        started.append(r)
        return r

    yield start
    for r in started:
        r.kill()


def long_list(tmp_path, n=3000):
    """A --files-from list naming one PNG (examples/digit-4.png's copy) n times, by its
    absolute path, and at least 128 KiB long; (path, list bytes)."""
    png = copy_example(4, tmp_path / "input" / "four.png")
    line = os.fsencode(png) + b"\n"
    n = max(n, (128 * 1024) // len(line) + 1)
    return png, line * n


def test_directory_is_searched_recursively_in_sorted_order(tmp_path):
    d = tmp_path / "scans"
    copy_example(1, d / "z1.png")
    copy_example(7, d / "c7.PNG")  # extension in capitals: still an image
    copy_example(2, d / "a" / "x2.png")
    copy_example(3, d / "a" / "deep" / "y3.png")
    copy_example(4, d / "b" / "noext4")  # no extension: a PNG by its first bytes
    copy_example(5, d / ".hidden" / "h5.png")  # hidden directory: skipped
    copy_example(6, d / ".dot6.png")  # hidden file: skipped
    (d / "notes.txt").write_text("not an image\n")  # not an image extension, not image bytes
    (d / "b" / "README").write_text("text without an extension\n")
    out = cli("--device", "cpu", d)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    got = results(out.stdout)
    # os.walk order: a directory's files (sorted), then its subdirectories (sorted), recursively.
    want = [d / "c7.PNG", d / "z1.png", d / "a" / "x2.png", d / "a" / "deep" / "y3.png", d / "b" / "noext4"]
    assert [p for p, _ in got] == [str(p) for p in want]
    assert [digit for _, digit in got] == [int(p.name[-5] if p.suffix else p.name[-1]) for p in want]


def test_directory_mixed_with_files_keeps_argument_order(tmp_path):
    d = tmp_path / "dir"
    copy_example(2, d / "two.png")
    copy_example(3, d / "sub" / "three.png")
    out = cli("--device", "cpu", EXAMPLES[9], d, EXAMPLES[0])
    assert out.returncode == 0, out.stderr
    assert results(out.stdout) == [
        (str(EXAMPLES[9]), 9),
        (str(d / "two.png"), 2),
        (str(d / "sub" / "three.png"), 3),
        (str(EXAMPLES[0]), 0),
    ]


def test_unexpanded_globs(tmp_path):
    d = tmp_path / "g"
    copy_example(2, d / "b2.png")
    copy_example(1, d / "a1.png")
    copy_example(3, d / "sub" / "c3.png")
    (d / "c.txt").write_text("text")
    out = cli("--device", "cpu", f"{d}/*.png")
    assert out.returncode == 0, out.stderr
    assert results(out.stdout) == [(str(d / "a1.png"), 1), (str(d / "b2.png"), 2)]
    out = cli("--device", "cpu", f"{d}/**/*.png")  # ** goes down directories
    assert out.returncode == 0, out.stderr
    assert results(out.stdout) == [(str(d / "a1.png"), 1), (str(d / "b2.png"), 2), (str(d / "sub" / "c3.png"), 3)]
    out = cli("--device", "cpu", f"{d}/[ab]?.png")
    assert out.returncode == 0, out.stderr
    assert [p for p, _ in results(out.stdout)] == [str(d / "a1.png"), str(d / "b2.png")]


def test_glob_that_matches_nothing_is_an_error_and_the_rest_goes_on(tmp_path):
    out = cli("--device", "cpu", f"{tmp_path}/*.jpg")
    assert out.returncode == 1
    assert out.stdout == ""
    assert "*.jpg" in out.stderr and "no file matches" in out.stderr
    out = cli("--device", "cpu", f"{tmp_path}/nothing-*.png", EXAMPLES[6])
    assert out.returncode == 1
    assert results(out.stdout) == [(str(EXAMPLES[6]), 6)]
    assert "no file matches" in out.stderr


def test_inputs_that_name_nothing_are_errors_in_their_place(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no image here")
    pattern = f"{tmp_path}/*.jpg"
    target = tmp_path / "r.jsonl"
    out = cli(
        "--device",
        "cpu",
        "--output",
        target,
        EXAMPLES[1],
        pattern,
        empty,
        EXAMPLES[2],
        "--files-from",
        tmp_path / "no-list.txt",
    )
    assert out.returncode == 1
    assert results(out.stdout) == [(str(EXAMPLES[1]), 1), (str(EXAMPLES[2]), 2)]
    assert len(out.stderr.strip().splitlines()) == 3, out.stderr
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(records) == 5
    assert records[0]["digit"] == 1 and records[3]["digit"] == 2
    assert records[1]["path"] == pattern and "no file matches" in records[1]["error"]
    assert records[2]["path"] == str(empty) and "error" in records[2]
    assert "no-list.txt" in records[4]["path"] and "error" in records[4]
    out = cli("--device", "cpu", empty)
    assert out.returncode == 1 and out.stdout == "" and str(empty) in out.stderr


def test_dash_reads_one_image_from_stdin():
    out = run_cli("--device", "cpu", "-", input=EXAMPLES[8].read_bytes())
    assert out.returncode == 0, out.stderr
    assert results(out.stdout) == [("<stdin>", 8)]
    out = run_cli("--device", "cpu", EXAMPLES[1], "-", EXAMPLES[2], input=EXAMPLES[5].read_bytes())
    assert out.returncode == 0, out.stderr
    assert results(out.stdout) == [(str(EXAMPLES[1]), 1), ("<stdin>", 5), (str(EXAMPLES[2]), 2)]
    out = run_cli("--device", "cpu", "-", input=b"not an image")
    assert out.returncode == 1 and out.stdout == b""
    assert b"<stdin>" in out.stderr


def test_stdin_can_be_read_once(tmp_path):
    out = run_cli("--device", "cpu", "-", "-", input=EXAMPLES[8].read_bytes())
    assert out.returncode == 2
    assert out.stdout == b"" and b"standard input" in out.stderr
    out = run_cli("--device", "cpu", "--files-from", "-", "-", input=EXAMPLES[8].read_bytes())
    assert out.returncode == 2


def test_files_from_a_file(tmp_path):
    a, b, c = (copy_example(k, tmp_path / f"in {k}.png") for k in (3, 1, 4))  # names with a space
    listing = tmp_path / "list.txt"
    listing.write_bytes(os.fsencode(a) + b"\n\n" + os.fsencode(b) + b"\r\n" + os.fsencode(c))  # no final newline
    out = cli("--device", "cpu", "--files-from", listing)
    assert out.returncode == 0, out.stderr
    assert results(out.stdout) == [(str(a), 3), (str(b), 1), (str(c), 4)]
    # images on the command line come first, then the list
    out = cli("--device", "cpu", EXAMPLES[9], "--files-from", listing)
    assert out.returncode == 0, out.stderr
    assert [d for _, d in results(out.stdout)] == [9, 3, 1, 4]
    # relative paths are taken from the working directory
    (tmp_path / "rel.txt").write_text("in 3.png\nin 1.png\n")
    out = run_cli("--device", "cpu", "--files-from", "rel.txt", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert results(out.stdout) == [("in 3.png", 3), ("in 1.png", 1)]
    out = cli("--device", "cpu", "--files-from", tmp_path / "no-such-list.txt")
    assert out.returncode == 1
    assert "no-such-list.txt" in out.stderr


def test_files_from_stdin_separated_by_nul(tmp_path):
    odd = copy_example(7, tmp_path / "new\nline.png")  # only -0 can name it
    plain = copy_example(2, tmp_path / "two.png")
    data = os.fsencode(odd) + b"\0" + os.fsencode(plain) + b"\0\0" + os.fsencode(EXAMPLES[0]) + b"\0"
    out = run_cli("--device", "cpu", "--json", "--files-from", "-", "-0", input=data)
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["path"], r["digit"]) for r in records] == [(str(odd), 7), (str(plain), 2), (str(EXAMPLES[0]), 0)]
    # without a final NUL
    out = run_cli("--device", "cpu", "--files-from", "-", "--null", input=os.fsencode(plain))
    assert out.returncode == 0, out.stderr
    assert results(out.stdout) == [(str(plain), 2)]


def test_null_without_files_from_is_a_usage_error():
    out = cli("-0", "--device", "cpu", EXAMPLES[0])
    assert out.returncode == 2
    assert out.stdout == "" and "-0" in out.stderr


def test_python_m_lenet_is_lenet_cli(tmp_path):
    want = run_cli("--device", "cpu", *EXAMPLES)
    assert want.returncode == 0
    got = run_cli("--device", "cpu", *EXAMPLES, module="lenet")
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout
    assert len(results(got.stdout)) == 10
    script = shutil.which("lenet-cli")
    if script:
        by_script = subprocess.run([script, "--device", "cpu", *map(str, EXAMPLES)], capture_output=True, timeout=120)
        assert by_script.returncode == 0 and by_script.stdout == want.stdout
    # the exit status comes through
    assert run_cli("--device", "cpu", tmp_path / "missing.png", module="lenet").returncode == 1
    assert run_cli(module="lenet").returncode == 2


def _inputs_with_errors(tmp_path):
    missing = tmp_path / "missing.png"
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    return [EXAMPLES[1], missing, text, EXAMPLES[2]]


def test_output_jsonl_has_a_record_per_input(tmp_path):
    inputs = _inputs_with_errors(tmp_path)
    target = tmp_path / "out" / "results.jsonl"
    target.parent.mkdir()
    target.write_text("old content\n")  # replaced whole
    out = cli("--device", "cpu", "--output", target, *inputs)
    assert out.returncode == 1
    assert [p for p, _ in results(out.stdout)] == [str(EXAMPLES[1]), str(EXAMPLES[2])]
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["path"] for r in records] == [str(p) for p in inputs]
    assert records[0]["digit"] == 1 and records[3]["digit"] == 2
    for r in (records[0], records[3]):
        assert "error" not in r and len(r["probabilities"]) == 10 and 0 < r["confidence"] <= 1
    assert "no such file" in records[1]["error"] and "digit" not in records[1]
    assert records[2]["error"] and "digit" not in records[2]
    assert part_files(target.parent) == []


def test_output_csv_has_a_header_and_a_row_per_input(tmp_path):
    import csv as csv_module

    inputs = _inputs_with_errors(tmp_path)
    target = tmp_path / "results.csv"
    out = cli("--device", "cpu", "-o", target, *inputs)
    assert out.returncode == 1
    with open(target, newline="", encoding="utf-8") as f:
        rows = list(csv_module.reader(f))
    assert rows[0] == ["path", "digit", "confidence", "mode", "error"] + [f"p{k}" for k in range(10)] + [
        "several_digits"
    ]
    rows = [dict(zip(rows[0], row)) for row in rows[1:]]
    assert [r["path"] for r in rows] == [str(p) for p in inputs]
    assert rows[0]["digit"] == "1" and rows[3]["digit"] == "2" and rows[0]["error"] == ""
    probs = [float(rows[0][f"p{k}"]) for k in range(10)]
    assert abs(sum(probs) - 1) < 1e-3 and max(range(10), key=probs.__getitem__) == 1
    assert "no such file" in rows[1]["error"] and rows[1]["digit"] == ""
    assert rows[2]["error"] != "" and rows[2]["digit"] == ""
    assert part_files(tmp_path) == []


def test_an_image_of_several_digits_says_so_in_every_output(tmp_path):
    """Issue 55: a photo of a number read as one digit printed a confident digit and
    nothing else; its line, its JSON and its CSV row now say that several were seen."""
    import csv as csv_module

    number, digit = REPO / "examples" / "number.jpg", REPO / "examples" / "photo-4.jpg"
    out = cli("--device", "cpu", number, digit)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"{number}: 0 (100.0%); several digits seen: --digits reads them as a number",
        f"{digit}: 4 (100.0%)",
    ]
    records = [json.loads(line) for line in cli("--device", "cpu", "--json", number, digit).stdout.splitlines()]
    assert [r["several_digits"] for r in records] == [True, False]
    cli("--device", "cpu", "-q", "-o", tmp_path / "r.jsonl", number, digit)
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [r["several_digits"] for r in records] == [True, False]
    cli("--device", "cpu", "-q", "-o", tmp_path / "r.csv", number, digit, EXAMPLES[3])
    with open(tmp_path / "r.csv", newline="", encoding="utf-8") as f:
        assert [row["several_digits"] for row in csv_module.DictReader(f)] == ["1", "0", "0"]


def test_output_all_good_exit_zero_and_bad_names(tmp_path):
    target = tmp_path / "ok.jsonl"
    out = cli("--device", "cpu", "--output", target, *EXAMPLES)
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["digit"] for line in target.read_text().splitlines()] == list(range(10))
    for name in ("results.txt", "results", "results.jsonl.tmp"):
        out = cli("--device", "cpu", "--output", tmp_path / name, EXAMPLES[0])
        assert out.returncode == 2, name
        assert not (tmp_path / name).exists()
    out = cli("--device", "cpu", "--output", tmp_path / "no-such-dir" / "r.jsonl", EXAMPLES[0])
    assert out.returncode == 2 and "no-such-dir" in out.stderr
    assert part_files(tmp_path) == []


def test_results_stream_out_before_the_inputs_end(tmp_path, running):
    png, data = long_list(tmp_path)
    run = running(["--device", "cpu", "--batch-size", "64", "--files-from", "-"], data)
    first = run.next_line()
    # stdin is still open: the process cannot have read all its inputs, let alone ended
    assert first is not None and not run.stdin_closed.is_set()
    assert run.proc.poll() is None
    assert results(first) == [(str(png), 4)]
    rc, rest, stderr = run.finish()
    assert rc == 0, stderr
    assert 1 + len(rest) == data.count(b"\n")
    assert set(results(b"".join(rest))) == {(str(png), 4)}


def test_sigkill_leaves_no_output_file(tmp_path, running):
    _, data = long_list(tmp_path)
    target = tmp_path / "out.jsonl"
    run = running(["--device", "cpu", "--batch-size", "64", "--files-from", "-", "--output", target], data)
    assert run.next_line() is not None
    run.proc.send_signal(signal.SIGKILL)
    rc, _, _ = run.finish()
    assert rc == -signal.SIGKILL
    assert not target.exists()  # a .part file may be left: nothing can clean up after SIGKILL


def test_sigterm_exits_143_without_an_output_file(tmp_path, running):
    _, data = long_list(tmp_path)
    target = tmp_path / "out.jsonl"
    run = running(["--device", "cpu", "--batch-size", "64", "--files-from", "-", "--output", target], data)
    assert run.next_line() is not None
    assert part_files(tmp_path) != []  # being written
    run.proc.send_signal(signal.SIGTERM)
    rc, _, stderr = run.finish()
    assert rc == 143, stderr
    assert "Traceback" not in stderr
    assert not target.exists()
    assert part_files(tmp_path) == []


def test_ctrl_c_exits_130_and_writes_what_was_done(tmp_path, running):
    png, data = long_list(tmp_path)
    target = tmp_path / "out.jsonl"
    run = running(["--device", "cpu", "--batch-size", "64", "--files-from", "-", "--output", target], data)
    first = run.next_line()
    assert first is not None
    run.proc.send_signal(signal.SIGINT)
    rc, rest, stderr = run.finish()
    assert rc == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert target.exists()
    text = target.read_text()
    assert text.endswith("\n")
    records = [json.loads(line) for line in text.splitlines()]  # every line whole
    assert all(isinstance(r, dict) and r["path"] == str(png) and r["digit"] == 4 for r in records)
    printed = results(first + b"".join(rest))
    assert 1 <= len(printed) <= len(records) < data.count(b"\n")  # what was printed was written too
    assert part_files(tmp_path) == []


def _pty_run(args, tmp_path, columns=80):
    """Runs the CLI with stderr on a pseudo-terminal of `columns` columns; (exit status,
    stdout bytes, what the terminal got)."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        with open(tmp_path / "pty-stdout.txt", "w+b") as stdout:
            proc = subprocess.Popen(
                [sys.executable, "-m", "lenet.cli", *map(str, args)],
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=slave,
            )
            os.close(slave)
            slave = None
            got = b""
            while True:  # read while it runs (a full terminal would block it), until EOF
                ready, _, _ = select.select([master], [], [], 60)
                if not ready:
                    proc.kill()
                    pytest.fail("the terminal got nothing for 60 s")
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer has closed the terminal
                    break
                if not chunk:
                    break
                got += chunk
            rc = proc.wait(60)
            stdout.seek(0)
            return rc, stdout.read(), got
    finally:
        if slave is not None:
            os.close(slave)
        os.close(master)


@pytest.fixture
def fifty_pngs(tmp_path):
    d = tmp_path / "fifty"
    for k in range(50):
        copy_example(k % 10, d / f"img{k:02d}-{k % 10}.png")
    return d


def test_progress_bar_on_a_terminal_only(tmp_path, fifty_pngs):
    rc, stdout, tty = _pty_run(["--device", "cpu", fifty_pngs], tmp_path)
    assert rc == 0, tty
    assert len(results(stdout)) == 50
    assert b"img/s" in tty or b"it/s" in tty
    # stderr a pipe: no progress bar
    out = cli("--device", "cpu", fifty_pngs)
    assert out.returncode == 0
    assert len(results(out.stdout)) == 50
    assert out.stderr == ""
    # --no-progress on a terminal
    rc, stdout, tty = _pty_run(["--device", "cpu", "--no-progress", fifty_pngs], tmp_path)
    assert rc == 0 and len(results(stdout)) == 50
    assert b"img" not in tty and b"it/s" not in tty


def test_quiet_on_a_terminal_has_no_progress_bar_and_no_output(tmp_path, fifty_pngs):
    rc, stdout, tty = _pty_run(["--device", "cpu", "-q", fifty_pngs], tmp_path)
    assert rc == 0, tty
    assert stdout == b""
    assert b"img" not in tty and b"it/s" not in tty and b"%|" not in tty
    assert tty.strip() == b""


def test_progress_bar_keeps_errors_readable(tmp_path, fifty_pngs):
    (fifty_pngs / "zz-bad.png").write_text("not an image")
    rc, stdout, tty = _pty_run(["--device", "cpu", fifty_pngs], tmp_path)
    assert rc == 1
    assert len(results(stdout)) == 50
    # what the terminal shows of each line: what follows its last carriage return
    lines = [l.split(b"\r")[-1] for l in tty.replace(b"\r\n", b"\n").split(b"\n")]
    assert any(l.startswith(b"lenet-cli: error: ") and b"zz-bad.png" in l for l in lines), tty


def test_quiet_prints_only_errors(tmp_path):
    missing = tmp_path / "missing.png"
    out = cli("-q", "--device", "cpu", EXAMPLES[3], missing, EXAMPLES[4])
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.strip().splitlines() == [f"lenet-cli: error: {missing}: no such file"]
    out = cli("--quiet", "--device", "cpu", *EXAMPLES)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""
    # -q and --output: nothing printed, everything written
    target = tmp_path / "q.jsonl"
    out = cli("-q", "--json", "--device", "cpu", "--output", target, EXAMPLES[3], missing)
    assert out.returncode == 1 and out.stdout == ""
    assert [json.loads(l).get("digit") for l in target.read_text().splitlines()] == [3, None]


# --- Regressions: a slow producer on --files-from -, | head, -q and notes, the Ctrl-C count. ---


def test_files_from_stdin_streams_a_short_list_from_a_slow_producer(tmp_path, running):
    """Paths from a slow producer (find | lenet-cli --files-from -) are classified as they
    come: not only once 64 KiB of them, or the end, came in."""
    copy_example(4, tmp_path / "d.png")
    data = b"d.png\n" * 1000  # 6 kB of paths, more than the first chunks of the pipeline
    run = running(["--device", "cpu", "--files-from", "-"], data, cwd=tmp_path)
    try:  # a hang guard, not a speed check: the first result takes well under a second
        first = run.lines.get(timeout=10)
    except queue.Empty:
        first = None
    got_a_line_while_stdin_open = first is not None and not run.stdin_closed.is_set()
    rc, rest, stderr = run.finish()
    assert rc == 0, stderr
    assert (first is not None) + len(rest) == 1000
    assert got_a_line_while_stdin_open


def test_closed_stdout_ends_the_run_without_a_traceback(tmp_path):
    """lenet-cli ... | head -1: exit status 141 (as if killed by SIGPIPE), no traceback."""
    png, data = long_list(tmp_path)
    listing = tmp_path / "list.txt"
    listing.write_bytes(data)
    with open(tmp_path / "stderr.txt", "w+b") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lenet.cli", "--device", "cpu", "--json", "--files-from", str(listing)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )
        try:
            assert json.loads(proc.stdout.readline())["digit"] == 4
            proc.stdout.close()  # like `| head -1`: megabytes of JSON lines are still to come
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        stderr = err.read().decode()
    assert proc.returncode == 141, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr


def test_version_into_a_closed_pipe_ends_without_a_traceback():
    """lenet-cli --version | head -1: the reader stops after one line."""
    proc = subprocess.run(
        f"{sys.executable} -m lenet.cli --version | head -1", shell=True, capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.startswith("version: ")
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr


def test_quiet_hides_the_cpu_fallback_note():
    """-q prints only errors: not the note 'using the CPU (...)' of --device auto where CUDA
    is built but not usable (elsewhere there is no note to hide)."""
    out = cli("-q", EXAMPLES[3])
    assert out.returncode == 0
    assert out.stdout == ""
    assert out.stderr == ""


def _main_thread_blocked_writing_a_pipe(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/wchan") as f:
            return "pipe_write" in f.read()
    except OSError:
        return False


def test_ctrl_c_message_counts_what_was_written(tmp_path):
    """'interrupted after N inputs': N counts the results of the batch in progress that were
    already printed and written, not only whole batches."""
    if not os.path.exists(f"/proc/{os.getpid()}/wchan"):
        pytest.skip("needs /proc/PID/wchan")
    _, data = long_list(tmp_path)
    listing = tmp_path / "list.txt"
    listing.write_bytes(data)
    target = tmp_path / "out.jsonl"
    with open(tmp_path / "stderr.txt", "w+b") as err:
        # stdout not read: the run blocks writing its results (megabytes of JSON lines) into the
        # full pipe, in the middle of its work; Ctrl-C lands there.
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lenet.cli",
                "--device",
                "cpu",
                "--json",
                "--files-from",
                str(listing),
                "--output",
                str(target),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            preexec_fn=_default_sigint,
        )
        try:
            for _ in range(600):
                if _main_thread_blocked_writing_a_pipe(proc.pid) or proc.poll() is not None:
                    break
                threading.Event().wait(0.05)
            else:
                pytest.skip("could not see the run block on its stdout")
            assert proc.poll() is None
            proc.send_signal(signal.SIGINT)
            stdout, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        stderr = err.read().decode()
    assert proc.returncode == 130, stderr
    records = [json.loads(line) for line in target.read_text().splitlines()]
    m = re.search(r"interrupted after ([\d,]+) inputs", stderr)
    assert m, stderr
    assert int(m.group(1).replace(",", "")) == len(records), stderr


# --- issue 64: what a Keras user tripped on. ----------------------------------------------


def test_ray_without_ray_installed_is_a_one_line_usage_error():
    """Was a traceback ending in ModuleNotFoundError, exit 1."""
    script = "import sys; sys.modules['ray'] = None; from lenet.cli import main; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run(
        [sys.executable, "-c", script, str(EXAMPLES[7]), "--ray", "-o", "never.jsonl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        'lenet-cli: error: --ray needs Ray, which is not installed: pip install "lenet[ray]"'
    ]
    assert out.stdout == ""


def test_messages_name_the_flags(tmp_path):
    """A weights-only file without its architecture: the message said 'arch=' (the Python
    keyword); lenet-cli's says '--arch'."""
    import h5py

    weights = tmp_path / "only.weights.h5"
    with h5py.File(weights, "w") as f:  # what Keras 2's save_weights writes: layer names, no model_config
        f.attrs["layer_names"] = np.array([b"dense"])
        f.attrs["keras_version"] = b"2.15.0"
        f.attrs["backend"] = b"tensorflow"
        f.create_group("dense").attrs["weight_names"] = np.array([], dtype="S1")
    out = cli("--device", "cpu", "--weights", weights, EXAMPLES[0])
    assert out.returncode == 2
    assert "give one with --arch" in out.stderr and "arch=" not in out.stderr, out.stderr
    from lenet.cli import as_flags

    assert as_flags("device='cuda' requested; give the architecture with arch=...") == (
        "--device cuda requested; give the architecture with --arch"
    )
    assert as_flags("e.g. mean=0.1307, std=0.3081; std=1 applies none; threads=-2, input_scale=1e-3") == (
        "e.g. --mean 0.1307, --std 0.3081; --std 1 applies none; --threads -2, --input-scale 1e-3"
    )


def test_mean_without_std_is_refused_with_both_named():
    """Issue 76: --mean alone used to take std = 1 in silence, half a normalization."""
    out = cli("--mean", "0.1307", EXAMPLES[0])
    assert out.returncode == 2
    assert "--mean given without --std: give both" in out.stderr and "--mean 0.1307, --std 0.3081" in out.stderr


def test_several_images_on_standard_input_are_all_read(tmp_path):
    """`cat a.png b.png | lenet-cli -` classified a.png and dropped b.png in silence."""
    photo = REPO / "examples" / "photo-4.jpg"
    data = EXAMPLES[3].read_bytes() + photo.read_bytes() + EXAMPLES[8].read_bytes()
    out = run_cli("--device", "cpu", "-", input=data)
    assert out.returncode == 0, out.stderr
    assert results(out.stdout) == [("<stdin>[0]", 3), ("<stdin>[1]", 4), ("<stdin>[2]", 8)]
    out = run_cli("--device", "cpu", "-", input=EXAMPLES[3].read_bytes() + b"trailing junk")
    assert out.returncode == 1 and results(out.stdout) == [("<stdin>[0]", 3)]
    assert b"<stdin>[1]: not an image" in out.stderr


def test_json_is_the_same_on_stdout_and_in_the_output_file(tmp_path):
    """`--json` printed "top", `-o x.jsonl` left it out."""
    target = tmp_path / "r.jsonl"
    args = ("--device", "cpu", "--top-k", "2", "--unsure-below", "0.5", "--json", "-o", target)
    out = cli(*args, EXAMPLES[7], REPO / "examples" / "number.jpg")
    assert out.returncode == 0, out.stderr
    printed = [json.loads(line) for line in out.stdout.splitlines()]
    assert [json.loads(line) for line in target.read_text().splitlines()] == printed
    assert [len(r["top"]) for r in printed] == [2, 2] and "unsure" in printed[0]
    out = cli("--device", "cpu", "--digits", "--json", "-o", target, REPO / "examples" / "number.jpg")
    assert out.returncode == 0, out.stderr
    assert [json.loads(line) for line in target.read_text().splitlines()] == [json.loads(out.stdout)]


def test_mode_mnist_on_a_dark_on_light_image_says_so(tmp_path):
    """A dark-on-white 200x200 digit under --mode mnist: a wrong answer and no word of why."""
    seven = 255 - cv2.imread(str(EXAMPLES[7]), cv2.IMREAD_GRAYSCALE)
    path = tmp_path / "drawn.png"
    cv2.imwrite(str(path), cv2.resize(seven, (200, 200), interpolation=cv2.INTER_CUBIC))
    out = cli("--device", "cpu", "--mode", "mnist", path, EXAMPLES[3])
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if "warning" in line]
    assert warnings == [
        f"lenet-cli: warning: {path}: --mode mnist, but the image is dark on a light ground (MNIST's digits "
        "are light on dark), so the answer may be wrong: --mode auto or photo finds the digit"
    ], out.stderr
    assert cli("--device", "cpu", path).stderr == ""  # auto reads it as a drawing, and says nothing


def test_save_says_what_it_wrote(tmp_path):
    target = tmp_path / "my.lenet"
    out = cli("--device", "cpu", "--weights", "lenet5", "--save", target)
    assert out.returncode == 0 and out.stdout == ""
    assert out.stderr.startswith(f"lenet-cli: wrote {target} ({target.stat().st_size:,} bytes): "), out.stderr
    assert "input (None, 28, 28, 1), 10 classes" in out.stderr
    assert cli("--device", "cpu", "-q", "--weights", "lenet5", "--save", target).stderr == ""
