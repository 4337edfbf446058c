"""Point 2 of issue 11: nothing lost (the config layer): saved configs are written atomically, so a failed
or interrupted write leaves neither a truncated file nor a destroyed previous one."""

from __future__ import annotations

import os

import pytest
from _shared import leftovers
from _shared.configs import W8, W8A8_IO

from quark.torch.quantization import files
from quark.torch.quantization.config.config import Config, QuantizationConfig


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_an_interrupted_config_save_keeps_the_previous_file(tmp_path, monkeypatch, suffix):
    path = tmp_path / f"config{suffix}"
    W8A8_IO.save(path)
    previous = path.read_text()
    other = Config(QuantizationConfig(weight=W8))

    def interrupted(temp):  # the new file is complete, the rename has not happened
        raise KeyboardInterrupt

    monkeypatch.setattr(files, "_fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        other.save(path)
    assert path.read_text() == previous
    assert leftovers(tmp_path) == []
    monkeypatch.undo()
    other.save(path)
    assert Config.load(path) == other


def test_atomic_path_publishes_only_on_success(tmp_path):
    target = tmp_path / "out.bin"
    with files.atomic_path(target) as temp:
        assert os.path.dirname(temp) == str(tmp_path) and temp.endswith(".tmp.bin")
        with open(temp, "wb") as f:
            f.write(b"new")
        assert not target.exists()  # nothing under the final name until the block ends
    assert target.read_bytes() == b"new"
    with pytest.raises(RuntimeError), files.atomic_path(target) as temp:
        with open(temp, "wb") as f:
            f.write(b"half")
        raise RuntimeError
    assert target.read_bytes() == b"new"
    assert leftovers(tmp_path) == []
