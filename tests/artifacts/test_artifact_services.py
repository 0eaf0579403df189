"""Artifact stores behave alike: in memory and on files (ADK-style versioned artifacts).

Most tests take ``service``/``make_service`` and run on both stores; the
file-only ones (reopening, layout, path traversal, crash leftovers) take
``file_root``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from headwater.artifacts import BaseArtifactService, FileArtifactService, InMemoryArtifactService
from headwater.artifacts.base import DEFAULT_MAX_ARTIFACT_BYTES
from headwater.errors import UserError
from headwater.types import Blob, FunctionCall, Part

APP = "shop"
S1: dict[str, str] = {"app_name": APP, "user_id": "alice", "session_id": "s1"}
S2: dict[str, str] = {"app_name": APP, "user_id": "alice", "session_id": "s2"}
BOB: dict[str, str] = {"app_name": APP, "user_id": "bob", "session_id": "s1"}

MakeService = Callable[..., BaseArtifactService]


@pytest.fixture
def file_root(tmp_path: Path) -> Path:
    return tmp_path / "artifacts"


@pytest.fixture(params=["memory", "file"])
def make_service(request: pytest.FixtureRequest, file_root: Path) -> MakeService:
    """Builds a service of the parametrized kind; file services share ``file_root``."""

    def make(**kwargs: Any) -> BaseArtifactService:
        if request.param == "memory":
            return InMemoryArtifactService(**kwargs)
        return FileArtifactService(file_root, **kwargs)

    return make


@pytest.fixture
def service(make_service: MakeService) -> BaseArtifactService:
    return make_service()


def blob(data: bytes, mime_type: str = "application/octet-stream") -> Part:
    return Part(inline_data=Blob(mime_type=mime_type, data=data))


def paths_under(root: Path) -> list[Path]:
    return list(root.rglob("*")) if root.exists() else []


def files_under(root: Path) -> list[Path]:
    return [p for p in paths_under(root) if p.is_file()]


async def assert_nothing_stored(service: BaseArtifactService, root: Path) -> None:
    for where in (S1, S2, BOB):
        assert await service.list_artifact_keys(**where) == []
    assert files_under(root) == []


async def test_versions_count_up_and_each_loads(service: BaseArtifactService) -> None:
    saved = [await service.save_artifact(**S1, filename="notes.txt", artifact=Part(text=f"v{i}"))
             for i in range(3)]
    assert saved == [0, 1, 2]
    for version in saved:
        part = await service.load_artifact(**S1, filename="notes.txt", version=version)
        assert part is not None
        assert part.text == f"v{version}"
    latest = await service.load_artifact(**S1, filename="notes.txt")
    assert latest is not None
    assert latest.text == "v2"
    assert await service.list_versions(**S1, filename="notes.txt") == [0, 1, 2]


async def test_text_and_binary_round_trip(service: BaseArtifactService) -> None:
    data = bytes(range(256)) + b"\x00\x00\xff\xfe end"
    text = "naïve ✓ 日本語 🚀\x00 tab\there\r\nline"
    await service.save_artifact(**S1, filename="raw.bin", artifact=blob(data, "image/png"))
    await service.save_artifact(**S1, filename="note.md", artifact=Part(text=text))

    got_blob = await service.load_artifact(**S1, filename="raw.bin")
    got_text = await service.load_artifact(**S1, filename="note.md")

    assert got_blob == Part(inline_data=Blob(mime_type="image/png", data=data))
    assert got_text == Part(text=text)


async def test_empty_artifacts_round_trip(service: BaseArtifactService) -> None:
    await service.save_artifact(**S1, filename="empty.txt", artifact=Part(text=""))
    await service.save_artifact(**S1, filename="empty.bin", artifact=blob(b""))
    assert await service.load_artifact(**S1, filename="empty.txt") == Part(text="")
    assert await service.load_artifact(**S1, filename="empty.bin") == blob(b"")


async def test_stored_data_is_a_copy(service: BaseArtifactService) -> None:
    data = bytearray(b"original")
    part = Part(inline_data=Blob(mime_type="text/plain", data=data))  # type: ignore[arg-type]
    await service.save_artifact(**S1, filename="a.bin", artifact=part)
    data[:] = b"changed!"
    loaded = await service.load_artifact(**S1, filename="a.bin")
    assert loaded is not None and loaded.inline_data is not None
    loaded.inline_data.mime_type = "application/x-mutated"
    again = await service.load_artifact(**S1, filename="a.bin")
    assert again == Part(inline_data=Blob(mime_type="text/plain", data=b"original"))


async def test_user_scoped_names_are_shared_by_the_users_sessions(
    service: BaseArtifactService,
) -> None:
    await service.save_artifact(**S1, filename="user:profile.json", artifact=Part(text="{}"))
    await service.save_artifact(**S1, filename="draft.txt", artifact=Part(text="mine"))

    from_s2 = await service.load_artifact(**S2, filename="user:profile.json")
    assert from_s2 == Part(text="{}")
    assert await service.list_artifact_keys(**S2) == ["user:profile.json"]
    assert await service.save_artifact(**S2, filename="user:profile.json",
                                       artifact=Part(text="{1}")) == 1
    assert await service.list_versions(**S1, filename="user:profile.json") == [0, 1]

    # the session's own names stay in the session
    assert await service.load_artifact(**S2, filename="draft.txt") is None
    # another user, or the same user in another app, sees nothing
    assert await service.load_artifact(**BOB, filename="user:profile.json") is None
    assert await service.list_artifact_keys(**BOB) == []
    other_app = {**S1, "app_name": "other"}
    assert await service.load_artifact(**other_app, filename="user:profile.json") is None


async def test_a_session_named_user_is_not_the_users_scope(service: BaseArtifactService) -> None:
    named_user = {**S1, "session_id": "user"}
    await service.save_artifact(**named_user, filename="x.txt", artifact=Part(text="session"))
    await service.save_artifact(**S1, filename="user:x.txt", artifact=Part(text="shared"))
    assert await service.list_artifact_keys(**named_user) == ["user:x.txt", "x.txt"]
    assert await service.list_artifact_keys(**S2) == ["user:x.txt"]
    assert await service.load_artifact(**S2, filename="x.txt") is None


async def test_list_keys_is_sorted_and_covers_both_scopes(service: BaseArtifactService) -> None:
    for name in ["b.txt", "user:z.txt", "a.txt", "user:a.txt", "B.txt", "a.txt"]:
        await service.save_artifact(**S1, filename=name, artifact=Part(text=name))
    assert await service.list_artifact_keys(**S1) == [
        "B.txt", "a.txt", "b.txt", "user:a.txt", "user:z.txt"]
    assert await service.list_versions(**S1, filename="a.txt") == [0, 1]
    assert await service.list_versions(**S1, filename="missing.txt") == []


async def test_delete_removes_every_version(service: BaseArtifactService) -> None:
    for i in range(3):
        await service.save_artifact(**S1, filename="a.txt", artifact=Part(text=f"v{i}"))
    await service.save_artifact(**S1, filename="b.txt", artifact=Part(text="keep"))
    await service.save_artifact(**S1, filename="user:c.txt", artifact=Part(text="shared"))

    await service.delete_artifact(**S1, filename="a.txt")
    await service.delete_artifact(**S2, filename="user:c.txt")  # any session of the user

    for version in (None, 0, 1, 2):
        assert await service.load_artifact(**S1, filename="a.txt", version=version) is None
    assert await service.list_versions(**S1, filename="a.txt") == []
    assert await service.list_artifact_keys(**S1) == ["b.txt"]
    # a fresh start at version 0
    assert await service.save_artifact(**S1, filename="a.txt", artifact=Part(text="new")) == 0
    assert await service.load_artifact(**S1, filename="a.txt") == Part(text="new")


async def test_deleting_a_missing_artifact_is_a_no_op(service: BaseArtifactService) -> None:
    await service.delete_artifact(**S1, filename="never.txt")
    await service.save_artifact(**S1, filename="a.txt", artifact=Part(text="x"))
    await service.delete_artifact(**S2, filename="a.txt")  # another session's: not this one
    assert await service.list_artifact_keys(**S1) == ["a.txt"]


async def test_missing_artifacts_load_as_none(service: BaseArtifactService) -> None:
    assert await service.load_artifact(**S1, filename="nothing.txt") is None
    await service.save_artifact(**S1, filename="a.txt", artifact=Part(text="x"))
    assert await service.load_artifact(**S1, filename="a.txt", version=1) is None
    assert await service.load_artifact(**S1, filename="a.txt", version=10**9) is None
    assert await service.load_artifact(**S2, filename="a.txt") is None
    assert await service.list_artifact_keys(**{**S1, "session_id": "never"}) == []


INVALID_FILENAMES = [
    "", "user:", "../x", "user:../x", "a/b", "/abs", "a\\b", "..\\x", ".", "..", "user:.",
    "user:..", "nul\x00byte", "user:\x00", "x" * 256, "user:" + "y" * 251,
]


@pytest.mark.parametrize("filename", INVALID_FILENAMES)
async def test_invalid_filenames_are_refused_and_nothing_is_stored(
    service: BaseArtifactService, file_root: Path, filename: str
) -> None:
    with pytest.raises(UserError, match="filename"):
        await service.save_artifact(**S1, filename=filename, artifact=Part(text="x"))
    with pytest.raises(UserError, match="filename"):
        await service.load_artifact(**S1, filename=filename)
    with pytest.raises(UserError, match="filename"):
        await service.list_versions(**S1, filename=filename)
    with pytest.raises(UserError, match="filename"):
        await service.delete_artifact(**S1, filename=filename)
    await assert_nothing_stored(service, file_root)


@pytest.mark.parametrize("filename", ["x" * 255, "user:" + "y" * 250, "...", ".hidden",
                                      "a b%2F.txt", "user:user:x", "ü" * 255, "C:x"])
async def test_edge_filenames_are_accepted(service: BaseArtifactService, filename: str) -> None:
    await service.save_artifact(**S1, filename=filename, artifact=Part(text="ok"))
    assert await service.load_artifact(**S1, filename=filename) == Part(text="ok")
    assert await service.list_artifact_keys(**S1) == [filename]


@pytest.mark.parametrize("field", ["app_name", "user_id", "session_id"])
@pytest.mark.parametrize("value", ["", ".", ".."])
async def test_invalid_ids_are_refused(
    service: BaseArtifactService, file_root: Path, field: str, value: str
) -> None:
    where = {**S1, field: value}
    with pytest.raises(UserError, match=field):
        await service.save_artifact(**where, filename="a.txt", artifact=Part(text="x"))
    with pytest.raises(UserError, match=field):
        await service.list_artifact_keys(**where)
    with pytest.raises(UserError, match=field):
        await service.load_artifact(**where, filename="a.txt")
    assert files_under(file_root) == []


@pytest.mark.parametrize(
    "artifact",
    [
        Part(),
        Part(text="a", inline_data=Blob(mime_type="text/plain", data=b"a")),
        Part(function_call=FunctionCall(id="c1", name="f")),
        Part(text="hmm", thought=True),
        Part(inline_data=Blob(mime_type="", data=b"a")),
        Part(inline_data=Blob(mime_type="text/plain", data="not bytes")),  # type: ignore[arg-type]
        "just a string",
    ],
    ids=["empty", "both", "call", "thought", "no-mime", "str-data", "not-a-part"],
)
async def test_unsupported_parts_are_refused(
    service: BaseArtifactService, file_root: Path, artifact: Any
) -> None:
    with pytest.raises(UserError, match=r"Part with exactly one of|MIME type"):
        await service.save_artifact(**S1, filename="a", artifact=artifact)
    await assert_nothing_stored(service, file_root)


async def test_text_that_is_not_utf8_is_refused(
    service: BaseArtifactService, file_root: Path
) -> None:
    with pytest.raises(UserError, match="UTF-8"):
        await service.save_artifact(**S1, filename="a", artifact=Part(text="bad \ud800"))
    await assert_nothing_stored(service, file_root)


async def test_size_limit(make_service: MakeService, file_root: Path) -> None:
    service = make_service(max_bytes=10)
    assert await service.save_artifact(**S1, filename="ok.bin", artifact=blob(b"0123456789")) == 0
    assert await service.save_artifact(**S1, filename="ok.txt", artifact=Part(text="é" * 5)) == 0
    before = files_under(file_root)

    with pytest.raises(UserError, match=r"11 bytes.*at most 10"):
        await service.save_artifact(**S1, filename="ok.bin", artifact=blob(b"0123456789A"))
    with pytest.raises(UserError, match="12 bytes"):  # six characters, twelve UTF-8 bytes
        await service.save_artifact(**S1, filename="big.txt", artifact=Part(text="é" * 6))

    assert await service.list_artifact_keys(**S1) == ["ok.bin", "ok.txt"]
    assert await service.list_versions(**S1, filename="ok.bin") == [0]
    assert files_under(file_root) == before


@pytest.mark.parametrize("max_bytes", [-1, 1.5, True, "10"])
def test_invalid_max_bytes_is_refused(make_service: MakeService, max_bytes: Any) -> None:
    with pytest.raises(UserError, match="max_bytes"):
        make_service(max_bytes=max_bytes)


def test_default_max_bytes_is_64_mib(service: BaseArtifactService) -> None:
    assert service.max_bytes == DEFAULT_MAX_ARTIFACT_BYTES == 64 * 1024 * 1024


@pytest.mark.parametrize("version", [-1, True, 1.0, "0"])
async def test_invalid_versions_are_refused(service: BaseArtifactService, version: Any) -> None:
    await service.save_artifact(**S1, filename="a", artifact=Part(text="x"))
    with pytest.raises(UserError, match="version"):
        await service.load_artifact(**S1, filename="a", version=version)


async def test_concurrent_saves_get_distinct_versions(service: BaseArtifactService) -> None:
    async def save(i: int) -> tuple[int, int]:
        version = await service.save_artifact(**S1, filename="log.txt",
                                              artifact=blob(f"payload {i}".encode()))
        return version, i

    results = await asyncio.gather(*(save(i) for i in range(20)))

    assert sorted(v for v, _ in results) == list(range(20))
    assert await service.list_versions(**S1, filename="log.txt") == list(range(20))
    for version, i in results:
        loaded = await service.load_artifact(**S1, filename="log.txt", version=version)
        assert loaded == blob(f"payload {i}".encode())


async def test_save_and_delete_racing_leave_a_consistent_store(
    service: BaseArtifactService,
) -> None:
    async def save(i: int) -> None:
        await service.save_artifact(**S1, filename="a", artifact=Part(text=str(i)))

    for _ in range(5):
        await asyncio.gather(*(save(i) for i in range(10)),
                             service.delete_artifact(**S1, filename="a"),
                             *(save(i) for i in range(10, 20)))
        versions = await service.list_versions(**S1, filename="a")
        texts = [await service.load_artifact(**S1, filename="a", version=v) for v in versions]
        assert all(t is not None and t.text is not None for t in texts)
        assert len({t.text for t in texts if t}) == len(versions)  # no version overwritten
        await service.delete_artifact(**S1, filename="a")
        assert await service.list_versions(**S1, filename="a") == []


# --- the file store -------------------------------------------------------------------------


async def test_a_new_file_service_sees_what_another_stored(file_root: Path) -> None:
    first = FileArtifactService(file_root)
    await first.save_artifact(**S1, filename="a.bin", artifact=blob(b"\x00\xff", "image/gif"))
    await first.save_artifact(**S1, filename="a.bin", artifact=blob(b"\x01"))
    await first.save_artifact(**S1, filename="user:pref", artifact=Part(text="dark"))

    second = FileArtifactService(str(file_root))
    assert await second.list_artifact_keys(**S2) == ["user:pref"]
    assert await second.list_artifact_keys(**S1) == ["a.bin", "user:pref"]
    assert await second.load_artifact(**S1, filename="a.bin", version=0) == blob(
        b"\x00\xff", "image/gif")
    assert await second.save_artifact(**S1, filename="a.bin", artifact=blob(b"\x02")) == 2
    assert await first.list_versions(**S1, filename="a.bin") == [0, 1, 2]


async def test_file_layout_and_sidecar(file_root: Path) -> None:
    service = FileArtifactService(file_root)
    where = {"app_name": "my app", "user_id": "a@b.c", "session_id": "s/1"}
    await service.save_artifact(**where, filename="r port.pdf",
                                artifact=blob(b"%PDF", "application/pdf"))
    await service.save_artifact(**where, filename="user:n.txt", artifact=Part(text="hi"))

    session_dir = file_root / "my%20app" / "a%40b.c" / "s%2F1" / "r%20port.pdf"
    assert (session_dir / "0").read_bytes() == b"%PDF"
    sidecar = json.loads((session_dir / "0.json").read_text())
    assert sidecar["mime_type"] == "application/pdf"
    assert sidecar["is_text"] is False
    user_dir = file_root / "my%20app" / "a%40b.c" / "user" / "user%3An.txt"
    assert (user_dir / "0").read_bytes() == b"hi"
    assert json.loads((user_dir / "0.json").read_text())["is_text"] is True
    assert not [p for p in paths_under(file_root) if p.name.startswith("!")]  # no temp files left


async def test_long_names_are_stored_under_a_hash(file_root: Path) -> None:
    service = FileArtifactService(file_root)
    long_name = "日本" * 120  # 240 characters, 2160 once quoted
    where = {**S1, "user_id": "ü" * 300}
    await service.save_artifact(**where, filename=long_name, artifact=Part(text="x"))
    assert await FileArtifactService(file_root).list_artifact_keys(**where) == [long_name]
    assert await service.load_artifact(**where, filename=long_name) == Part(text="x")
    assert all(len(p.name) <= 255 for p in paths_under(file_root))


async def test_an_interrupted_save_is_invisible_and_its_version_not_reused(
    file_root: Path,
) -> None:
    service = FileArtifactService(file_root)
    await service.save_artifact(**S1, filename="a", artifact=Part(text="v0"))
    key_dir = file_root / APP / "alice" / "s1" / "a"
    (key_dir / "1").write_bytes(b"half")  # a crash after claiming version 1
    (key_dir / "!tmp-deadbeef").write_bytes(b"half")
    orphan_dir = key_dir.parent / "orphan"  # a crash before any version was committed
    orphan_dir.mkdir()
    (orphan_dir / "0").write_bytes(b"")

    assert await service.list_versions(**S1, filename="a") == [0]
    assert await service.load_artifact(**S1, filename="a") == Part(text="v0")
    assert await service.list_artifact_keys(**S1) == ["a"]
    assert await service.save_artifact(**S1, filename="a", artifact=Part(text="v2")) == 2
    assert await service.list_versions(**S1, filename="a") == [0, 2]


@pytest.mark.parametrize(
    "where",
    [
        {"app_name": "../escape", "user_id": "alice", "session_id": "s1"},
        {"app_name": APP, "user_id": "../../..", "session_id": "s1"},
        {"app_name": APP, "user_id": "alice", "session_id": "../../../../x"},
        {"app_name": "/etc", "user_id": "..\\..", "session_id": "%2e%2e"},
        {"app_name": "...", "user_id": "....", "session_id": "user"},
    ],
)
async def test_path_traversal_stays_inside_root(tmp_path: Path, where: dict[str, str]) -> None:
    root = tmp_path / "root"
    service = FileArtifactService(root)
    for bad in ({**where, "app_name": ".."}, {**where, "user_id": "."}):
        with pytest.raises(UserError):
            await service.save_artifact(**bad, filename="x", artifact=Part(text="x"))
    with pytest.raises(UserError):
        await service.save_artifact(**where, filename="../x", artifact=Part(text="x"))

    await service.save_artifact(**where, filename="user:..x", artifact=Part(text="s"))
    await service.save_artifact(**where, filename="..x", artifact=Part(text="t"))

    assert sorted(p.name for p in paths_under(tmp_path) if p.parent == tmp_path) == ["root"]
    for path in paths_under(root):
        assert path.resolve().is_relative_to(root.resolve())
        assert path.name not in (".", "..")
    assert await service.list_artifact_keys(**where) == ["..x", "user:..x"]
    assert await service.load_artifact(**where, filename="..x") == Part(text="t")


async def test_relative_root_is_fixed_at_construction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    service = FileArtifactService("store")
    os.mkdir(tmp_path / "elsewhere")
    monkeypatch.chdir(tmp_path / "elsewhere")
    await service.save_artifact(**S1, filename="a", artifact=Part(text="x"))
    assert (tmp_path / "store" / APP).is_dir()
    assert not (tmp_path / "elsewhere" / "store").exists()
