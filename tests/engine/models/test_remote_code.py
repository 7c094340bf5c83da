"""A model's own code: a model folder — or a checkpoint's — that ships .py files
named by auto_map runs them only after the same trust decision as a custom checker. Without
--trust-remote-code every command-line path (train SESSION, train SESSION --resume, train
--resume RUN, train CONFIG, eval RUN) exits 2 naming the flag and the marker the code would
write never appears; with it the code runs, is remembered by its fingerprint, and changed code
asks again. The loaders themselves refuse without a permission, so nothing can skip the gate."""

from __future__ import annotations

import os
import shutil

import pytest

from grpo_desktop.engine.models.remote_code import (
    RemoteCodePermission,
    RemoteCodeRefused,
    code_to_trust,
    model_code,
    permission_for,
)
from grpo_desktop.session.trust import TrustStore
from tests.support.hazards import (
    cli,
    model_with_code,
    plant_model_code,
    set_trust_remote_code,
    small_config,
    train_in_process,
    write_session,
)


@pytest.fixture
def marker(tmp_path) -> str:
    return str(tmp_path / "the-model-code-ran")


@pytest.fixture
def shipped(tmp_path, micro_model_dir, marker) -> str:
    """A model folder that ships code whose import writes `marker`."""
    return model_with_code(micro_model_dir, str(tmp_path / "shipped-model"), marker)


def test_the_fingerprint_is_the_code_not_where_it_lies(tmp_path, shipped, micro_model_dir):
    code = model_code(shipped)
    assert code is not None and code.source == os.path.abspath(shipped)
    assert code.files == (
        "configuration_shipped.py",
        "modeling_shipped.py",
        "tokenization_shipped.py",
    )
    copy = shutil.copytree(shipped, tmp_path / "moved")
    assert model_code(str(copy)).fingerprint == code.fingerprint  # moved: the same code
    with open(copy / "modeling_shipped.py", "a") as fh:
        fh.write("# one more line\n")
    assert model_code(str(copy)).fingerprint != code.fingerprint  # changed: other code
    assert model_code(micro_model_dir) is None  # no .py, no auto_map: nothing of its own
    assert model_code("builtin:demo") is None  # the app's own
    hub = model_code("someone/some-model")
    assert hub is not None and hub.source == "hub:someone/some-model"  # the Hub's code: always
    assert code_to_trust(shipped, False) == []  # the setting off: nothing runs, nothing to ask


def test_the_loaders_refuse_model_code_without_a_permission(shipped, marker):
    from grpo_desktop.engine.models.loading import load_policy, load_tokenizer

    cfg = small_config(shipped).replace(model={"trust_remote_code": True})
    with pytest.raises(RemoteCodeRefused, match="has not been trusted"):
        load_tokenizer(shipped, True)
    with pytest.raises(RemoteCodeRefused, match="--trust-remote-code"):
        load_policy(cfg)
    other = RemoteCodePermission(frozenset({"0" * 64}))  # a permission for some other code
    with pytest.raises(RemoteCodeRefused, match="not the code that was trusted"):
        load_policy(cfg, remote_code=other)
    assert type(load_tokenizer(shipped, False)).__name__ != "ShippedTokenizer"  # setting off
    assert not os.path.exists(marker)
    allowed = permission_for(code_to_trust(shipped, True))
    assert type(load_tokenizer(shipped, True, allowed)).__name__ == "ShippedTokenizer"
    assert os.path.exists(marker)  # with the permission it really runs: the test can fail


def _assert_refused(code: int, err: str, marker: str) -> None:
    assert code == 2, err
    assert "--trust-remote-code" in err and "model.trust_remote_code" in err, err
    assert "shipped" in err and "Traceback" not in err, err
    assert not os.path.exists(marker), "the model's code ran without trust"


def test_every_command_line_path_refuses_untrusted_model_code(
    tmp_path, shipped, marker, micro_model_dir
):
    # A session from elsewhere whose model ships code: train SESSION.
    session = write_session(str(tmp_path / "fresh.grpo"), small_config(shipped), trust_code=True)
    _assert_refused(*cli("train", session, "--quiet"), marker)
    assert not os.path.exists(os.path.join(session, "run"))  # nothing was written
    # A settings file: train CONFIG --out.
    config = tmp_path / "settings.json"
    config.write_text(small_config(shipped).replace(model={"trust_remote_code": True}).to_json())
    _assert_refused(*cli("train", str(config), "--out", str(tmp_path / "o"), "--quiet"), marker)
    # A run folder whose checkpoint ships code beside its model and tokenizer (the base model
    # has none): train --resume RUN and eval RUN.
    run = str(tmp_path / "run")
    train_in_process(small_config(micro_model_dir), run)
    plant_model_code(os.path.join(run, "checkpoints", "step-00000001", "model"), marker)
    set_trust_remote_code(os.path.join(run, "config.json"))
    _assert_refused(*cli("train", "--resume", run, "--steps", "2", "--quiet"), marker)
    _assert_refused(*cli("eval", run, "--n", "1", "--no-sample"), marker)
    # A session with such a run: train SESSION --resume.
    held = write_session(str(tmp_path / "held.grpo"), small_config(micro_model_dir))
    shutil.copytree(run, os.path.join(held, "run"))
    set_trust_remote_code(os.path.join(held, "session.json"), key="config")
    _assert_refused(*cli("train", held, "--resume", "--steps", "2", "--quiet"), marker)


def test_trust_remote_code_runs_it_remembers_it_and_changed_code_asks_again(
    tmp_path, shipped, marker
):
    config = tmp_path / "settings.json"
    config.write_text(small_config(shipped).replace(model={"trust_remote_code": True}).to_json())
    code, err = cli("train", str(config), "--out", str(tmp_path / "a"), "--trust-remote-code")
    assert code == 0, err
    assert os.path.exists(marker)  # it ran, as allowed
    assert not TrustStore().untrusted_code(code_to_trust(shipped, True))  # remembered
    os.remove(marker)
    code, err = cli("train", str(config), "--out", str(tmp_path / "b"), "--quiet")
    assert code == 0, err  # remembered: no flag needed the second time
    assert os.path.exists(marker)
    os.remove(marker)
    with open(os.path.join(shipped, "tokenization_shipped.py"), "a") as fh:
        fh.write("# changed after it was trusted\n")
    _assert_refused(*cli("train", str(config), "--out", str(tmp_path / "c"), "--quiet"), marker)


def test_eval_of_a_model_folder_runs_its_code_only_with_trust_remote_code(shipped, marker):
    code, err = cli("eval", shipped, "--n", "1", "--no-sample")
    assert code == 0, err  # loads with transformers' own Llama classes: its code stays unrun
    assert not os.path.exists(marker)
    code, err = cli("eval", shipped, "--n", "1", "--no-sample", "--trust-remote-code")
    assert code == 0, err
    assert os.path.exists(marker)
