"""Log parsing on lines shaped by the pinned Miles/Slime printing code (see bench.logparse)."""

from bench.logparse import parse_log

PREFIX = "\x1b[36m(RolloutManager pid=2211, ip=10.0.3.17)\x1b[0m [2026-11-30 08:10:00.250 rollout_manager] metrics.py:89 - "
TRAIN = "\x1b[36m(MegatronTrainRayActor pid=2405, ip=10.0.2.10)\x1b[0m [2026-11-30 08:11:00.000 train_cell0_rank0] train_metric_utils.py:56 - "
SLIME = "\x1b[36m(RolloutManager pid=77)\x1b[0m [2026-11-30 09:00:00,123] rollout.py:1190 - "


def rollout(step: int, tps: float = 1000.0) -> str:
    d = {"rollout/response_len/mean": 3000.5, "perf/rollout_time": 90.0, "perf/tokens_per_gpu_per_sec": tps}
    return f"{PREFIX}perf {step}: {d}"


def train(step: int) -> str:
    return f"{TRAIN}perf {step}: " + str({"perf/train_wait_time": 90.0, "perf/train_time": 60.0, "perf/step_time": 150.0})


def test_both_lines_of_a_step_merge_with_time():
    log = parse_log("\n".join(["Running entrypoint for job raysubmit_x", rollout(0), train(0), rollout(1)]))
    assert [s.rollout_id for s in log.steps] == [0, 1]
    assert log.steps[0].metrics["perf/step_time"] == 150.0
    assert log.steps[0].metrics["perf/tokens_per_gpu_per_sec"] == 1000.0
    assert log.steps[0].at.isoformat() == "2026-11-30T08:10:00.250000+00:00"
    assert not log.malformed


def test_truncated_and_malformed_lines_are_counted_not_read():
    cut = rollout(2)[:-30]
    garbage = f"{PREFIX}perf 3: {{'perf/rollout_time': __import__('os')}}"
    log = parse_log("\n".join([rollout(0), cut, garbage, rollout(4)]))
    assert [s.rollout_id for s in log.steps] == [0, 4]
    assert [n for n, _ in log.malformed] == [2, 3]


def test_nan_inf_and_slime_prefix_and_dedup_suffix():
    line = f"{SLIME}perf 5: {{'perf/rollout_time': nan, 'perf/tokens_per_gpu_per_sec': inf}} \x1b[32m [repeated 3x across cluster]\x1b[0m"
    log = parse_log(line)
    assert log.collapsed == 3
    assert log.steps[0].rollout_id == 5 and log.steps[0].metrics["perf/tokens_per_gpu_per_sec"] == float("inf")
    assert log.steps[0].at.microsecond == 123000


def test_a_redone_step_is_a_new_occurrence_and_first_keeps_the_first():
    log = parse_log("\n".join([rollout(3, 100.0), train(3), rollout(3, 200.0)]))
    assert len(log.steps) == 2
    assert log.first()[3].metrics["perf/tokens_per_gpu_per_sec"] == 100.0


def test_other_lines_are_ignored():
    text = "\n".join([f"{PREFIX}eval 3: {{'eval/aime': 0.4}}", f"{TRAIN}critic-step 3: {{'train/critic-loss': 1}}",
                      "performance perf counters: none"])
    log = parse_log(text)
    assert not log.steps and not log.malformed and not log.train


def test_numpy_2_scalars_of_log_passrate_are_read():
    """Miles' --log-passrate adds np.mean(...) values (miles/utils/metric_utils.py:34-35), printed by numpy 2
    as np.float64(...): the rest of the line must still be read."""
    line = rollout(4)[:-1] + ", 'passrate/pass@1': np.float64(0.5), 'passrate/pass@8': np.float64(nan)}"
    log = parse_log(line)
    assert not log.malformed
    assert log.steps[0].metrics["passrate/pass@1"] == 0.5 and log.steps[0].metrics["perf/rollout_time"] == 90.0


def test_reward_and_train_lines_are_kept():
    text = "\n".join([rollout(2), f"{TRAIN}rollout 2: {{'rollout/raw_reward': 0.25, 'rollout/truncated': 0.0}}",
                      f"{TRAIN}step 2: {{'train/ppo_kl': 0.001, 'train/loss': 0.3}}", train(2)])
    log = parse_log(text)
    assert len(log.steps) == 1 and log.steps[0].metrics["rollout/raw_reward"] == 0.25
    assert log.steps[0].metrics["perf/step_time"] == 150.0
    assert log.train == [(2, {"train/ppo_kl": 0.001, "train/loss": 0.3})]


from hypothesis import given, strategies as st  # noqa: E402

from bench.logparse import _literal, _repr_as_json  # noqa: E402

KEYS = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
VALUES = st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                   st.none(), st.text(max_size=5))


@given(st.dictionaries(KEYS, VALUES, max_size=8))
def test_the_json_reading_is_literal_eval_or_declines(d):
    """The fast reading gives literal_eval's dict exactly (nan compared as nan), or declines."""
    import ast
    import math
    text = repr(d)
    fast, slow = _repr_as_json(text), _literal(text)
    assert slow is not None and slow.keys() == d.keys()
    if "nan" not in text and "inf" not in text:
        assert slow == ast.literal_eval(text)
    if fast is not None:
        assert fast.keys() == slow.keys() == d.keys()
        for k in d:
            a, b = fast[k], slow[k]
            assert type(a) is type(b) and (a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)))
