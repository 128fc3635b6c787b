"""read_number's second reader (issue 55): the candidate digits the engine's model is
unsure of are read again by a larger network (images/number.py's ``rechecked``,
``Engine(recheck_with=...)``; lenet-tf for the shipped lenet5)."""

import pickle
from pathlib import Path

import numpy as np
import pytest

import lenet
from lenet.images.number import RECHECK_BELOW, rechecked

DATA = Path(__file__).resolve().parents[1] / "data"


def _first(probabilities):
    return lambda rows: np.array(probabilities, np.float32)[: len(rows)]


def test_only_the_rows_under_the_threshold_are_read_again_and_replaced():
    first = [[0.9, 0.1], [0.5, 0.5], [RECHECK_BELOW, 1 - RECHECK_BELOW], [0.59, 0.41], [0.0, 1.0]]
    asked = []

    def second(rows):
        asked.append(rows.copy())
        return np.full((len(rows), 2), 0.25, np.float32)

    rows = np.arange(5, dtype=np.float32).reshape(5, 1, 1, 1)
    got = rechecked(_first(first), lambda: second)(rows)
    assert len(asked) == 1 and asked[0].ravel().tolist() == [1.0, 3.0]  # 0.5 and 0.59: under 0.6
    np.testing.assert_array_equal(got[[0, 2, 4]], np.array(first, np.float32)[[0, 2, 4]])
    np.testing.assert_array_equal(got[[1, 3]], np.full((2, 2), 0.25, np.float32))


def test_no_second_reader_is_made_when_every_row_is_sure():
    def never():
        raise AssertionError("the second reader was asked for")

    got = rechecked(_first([[0.99, 0.01], [0.3, 0.7]]), never)(np.zeros((2, 1, 1, 1), np.float32))
    np.testing.assert_array_equal(got, np.array([[0.99, 0.01], [0.3, 0.7]], np.float32))


def test_a_read_only_answer_is_copied_not_written():
    answer = np.array([[0.5, 0.5]], np.float32)
    answer.flags.writeable = False
    got = rechecked(lambda rows: answer, lambda: lambda rows: np.array([[1.0, 0.0]], np.float32))(np.zeros((1, 1)))
    assert got.tolist() == [[1.0, 0.0]] and answer.tolist() == [[0.5, 0.5]]


@pytest.mark.parametrize(
    "weights,expected",
    [(None, "lenet-tf"), ("lenet5", "lenet-tf"), ("lenet-keras", None), ("lenet-tf", None)],
)
def test_auto_rechecks_the_shipped_lenet5_with_lenet_tf_only(weights, expected):
    assert lenet.Engine(weights, device="cpu")._made_with["recheck_with"] == expected


def test_auto_leaves_a_users_file_alone(tmp_path):
    path = tmp_path / "mine.lenet"
    lenet.load("lenet5").save(path)  # lenet5's weights, but the user's file: the user's model
    assert lenet.Engine(path, device="cpu")._made_with["recheck_with"] is None
    assert lenet.Engine(lenet.load("lenet5"), device="cpu")._made_with["recheck_with"] is None


def test_a_number_lenet5_misreads_alone_is_read_with_its_second_reader():
    # The committed photo-like set's European 1s: the 8 of "8761173", read as 1 by lenet5
    # alone (unsure), is read as 8 by lenet-tf.
    image = DATA / "photoset" / "number-european-05.jpg"
    with lenet.Engine("lenet5", device="cpu", recheck_with=None) as alone:
        assert alone.read_number(image).number == "1761173"
    with lenet.Engine("lenet5", device="cpu") as rechecked_engine:
        number = rechecked_engine.read_number(image)
        assert number.number == "8761173"
        assert rechecked_engine._recheck is not None
    assert rechecked_engine._recheck.closed  # closed with its engine
    # Its answers are the second reader's, bit for bit.
    with lenet.Engine("lenet-tf", device="cpu") as tf:
        frame = number.digits[0]._input[None]  # the rows as read (float32 pixels)
        np.testing.assert_array_equal(number.digits[0].probabilities, tf.row_probabilities(frame)[0])


def test_infer_is_not_rechecked():
    image = DATA / "photoset" / "number-european-05.jpg"
    a = lenet.Engine("lenet5", device="cpu").infer(image)
    b = lenet.Engine("lenet5", device="cpu", recheck_with=None).infer(image)
    np.testing.assert_array_equal(a.probabilities, b.probabilities)


def test_a_second_reader_of_other_images_is_refused_naming_both_on_first_use():
    eng = lenet.Engine("lenet5", device="cpu", recheck_with=DATA / "onnx" / "lenet5_relu_max_32.onnx")
    with pytest.raises(lenet.InputError, match=r"recheck_with: .*lenet5_relu_max_32.onnx takes \(32, 32, 1\)"):
        eng.read_number(DATA / "photoset" / "number-european-05.jpg")


def test_the_second_reader_travels_with_a_pickled_engine():
    eng = lenet.Engine("lenet5", device="cpu", recheck_with="lenet-keras")
    copy = pickle.loads(pickle.dumps(eng))
    assert copy._made_with["recheck_with"] == "lenet-keras"
    image = DATA / "photoset" / "number-european-05.jpg"
    assert copy.read_number(image) == eng.read_number(image)
