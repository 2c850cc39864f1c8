"""`ascp.caching.files`: the one file identity behind every key derived from a file."""

from __future__ import annotations

import os

from ascp.caching.files import derived_path, file_identity, folder_identity


def _touch_ns(path, ns: int) -> None:
    os.utime(path, ns=(ns, ns))


def test_a_file_rewritten_within_the_same_second_gets_another_identity(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"weights")
    _touch_ns(path, 1_700_000_000_100_000_000)
    first, first_derived = file_identity(path), derived_path(path, ".f16.gguf")
    assert first == (str(path.resolve()), 7, 1_700_000_000_100_000_000)
    _touch_ns(path, 1_700_000_000_900_000_000)  # same integer second: the old rule saw no change
    assert file_identity(path) != first and derived_path(path, ".f16.gguf") != first_derived
    assert derived_path(path, ".f16.gguf") == derived_path(path, ".f16.gguf")


def test_the_request_cache_and_folder_embedders_use_it(tmp_path):
    from ascp.embed.embedders import embedder_id
    from ascp.lm.request_cache import files_identity

    folder = tmp_path / "embedder"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"v1")
    (folder / "config.json").write_text("{}")
    assert files_identity([folder / "model.safetensors"]) == [file_identity(folder / "model.safetensors")]
    assert folder_identity(folder) == [file_identity(folder / "config.json"),
                                       file_identity(folder / "model.safetensors")]
    before = embedder_id(str(folder))
    assert embedder_id(str(folder)) == before and before.startswith("embedder-")
    (folder / "model.safetensors").write_bytes(b"v2 longer")  # the model rewritten in place
    assert embedder_id(str(folder)) != before  # so its vectors go to another cache file
    assert folder_identity(tmp_path / "missing") == []
