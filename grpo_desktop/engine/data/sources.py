"""Reading the data sources into one table shape: files, save_to_disk folders, hub datasets.

The reading half of engine.data.dataset. `open_source(cfg, limit)` returns the chosen split as a
`Table` and, when training on another split, the 'test' split; every problem is a `DataError`
naming the file or id and what to do. No splitting, answer parsing or prompt building here.
`datasets` and `pyarrow` are imported lazily (importing them is slow).

Try it:
    printf '{"question": "What is 2 × 3?", "answer": "6"}\\n' > problems.jsonl
    python -c "from grpo_desktop.engine.data.sources import open_source; from \\
grpo_desktop.engine.config import DataConfig; print(open_source(DataConfig(source='file', \\
path='problems.jsonl'), limit=3)[0].head(3))"
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_desktop.engine.config import DataConfig
from grpo_desktop.engine.errors import DataError

FILE_EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")
EVAL_SPLIT = "test"
_TRUE = {"1", "ON", "YES", "TRUE"}


@dataclass
class Table:
    """One split of a source, whatever it was read from."""

    where: str
    columns: list[str]
    num_rows: int
    column: Callable[[str], list]
    head: Callable[[int], list[dict]]


# ----------------------------------------------------------------------------- files


def _rows_table(where: str, rows: list[dict], columns: list[str] | None = None) -> Table:
    if columns is None:
        columns = list(dict.fromkeys(key for row in rows for key in row))
    return Table(where, columns, len(rows), lambda c: [r.get(c) for r in rows], lambda n: rows[:n])


def _json_kind(value: Any) -> str:
    kinds = {dict: "an object", list: "an array", str: "a string", type(None): "null"}
    return kinds.get(type(value), "a number" if isinstance(value, (int, float)) else "a value")


def _read_jsonl(path: Path, limit: int | None) -> list[dict]:
    rows: list[dict] = []
    with path.open(encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"{path}, line {lineno} is not valid JSON ({exc.msg} at column {exc.colno}). "
                    'Each line must be one JSON object, like {"question": "...", "answer": "..."}. '
                    "Fix or delete that line."
                ) from None
            if not isinstance(row, dict):
                raise DataError(
                    f"{path}, line {lineno} holds {_json_kind(row)}, not a JSON object. Each line "
                    'must be one object, like {"question": "...", "answer": "..."}.'
                )
            rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
    return rows


def _read_json(path: Path, limit: int | None) -> list[dict]:
    text = path.read_text(encoding="utf-8-sig")
    try:
        data = json.loads(text) if text.strip() else []
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # several values: JSON lines in a .json file
            return _read_jsonl(path, limit)
        raise DataError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}). "
            "Use an array of objects or one object per line."
        ) from None
    if isinstance(data, dict):  # {"data": [...]} or a single row
        lists = [v for v in data.values() if isinstance(v, list)]
        data = lists[0] if len(data) == 1 and len(lists) == 1 else [data]
    if not isinstance(data, list):
        raise DataError(f"{path} holds {_json_kind(data)}; expected an array of objects.")
    for i, row in enumerate(data, 1):
        if not isinstance(row, dict):
            raise DataError(f"{path}: item {i} is {_json_kind(row)}, not an object with columns.")
    return data[:limit] if limit is not None else data


def _read_csv(path: Path, limit: int | None) -> Table:
    rows: list[dict] = []
    with path.open(encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        try:
            columns = list(reader.fieldnames or [])
            for row in reader:
                if None in row:
                    raise DataError(
                        f"{path}, line {reader.line_num} has more values than the header has "
                        "columns. Put text that contains commas in double quotes."
                    )
                rows.append(row)
                if limit is not None and len(rows) >= limit:
                    break
        except csv.Error as exc:
            raise DataError(f"{path}, line {reader.line_num} is not valid CSV: {exc}.") from None
    return _rows_table(str(path), rows, columns)


def _read_parquet(path: Path, limit: int | None) -> Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        columns = list(pf.schema_arrow.names)
        if limit is None:
            rows = pf.read().to_pylist()
        else:
            rows = next(pf.iter_batches(batch_size=max(limit, 1)), pa.table({})).to_pylist()
    except (pa.ArrowException, ValueError) as exc:
        raise DataError(f"{path} is not a readable Parquet file ({exc}).") from None
    return _rows_table(str(path), rows[:limit] if limit is not None else rows, columns)


def _open_file(path: Path, limit: int | None) -> Table:
    if not path.exists():
        raise DataError(
            f"Data file not found: {path}. Check the path (relative paths start from {Path.cwd()})."
        )
    if path.is_dir():
        raise DataError(
            f"{path} is a folder. For a folder saved with save_to_disk choose the data source "
            "'disk'; otherwise choose a .jsonl, .json, .csv or .parquet file inside it."
        )
    ext = path.suffix.lower()
    if ext not in FILE_EXTENSIONS:
        raise DataError(
            f"{path}: unsupported file type '{ext or 'no extension'}'. Use .jsonl (one JSON object "
            "per line), .json, .csv (with a header row) or .parquet."
        )
    try:
        if ext == ".csv":
            return _read_csv(path, limit)
        if ext == ".parquet":
            return _read_parquet(path, limit)
        reader = _read_jsonl if ext == ".jsonl" else _read_json
        return _rows_table(str(path), reader(path, limit))
    except UnicodeDecodeError:
        raise DataError(f"{path} is not UTF-8 text. Save it with UTF-8 encoding.") from None
    except OSError as exc:
        raise DataError(f"Cannot read {path}: {exc.strerror or exc}.") from None


# ----------------------------------------------------------------------------- datasets, hub


def _dataset_table(where: str, ds: Any) -> Table:
    return Table(
        where,
        list(ds.column_names),
        len(ds),
        lambda c: list(ds[c]),
        lambda n: ds.select(range(min(n, len(ds)))).to_list(),
    )


def _pick_split(obj: Any, cfg: DataConfig, where: str) -> tuple[Table, Table | None]:
    """The chosen split, and the 'test' split to hold out from when training on another one."""
    if not hasattr(obj, "keys"):  # a single Dataset
        return _dataset_table(where, obj), None
    splits = list(obj.keys())
    if cfg.split not in obj:
        raise DataError(
            f"{where} has no split '{cfg.split}'. Its splits are: {', '.join(splits)}. Set "
            "'Split' (data.split) to one of them."
        )
    main = _dataset_table(f"{where}, split '{cfg.split}'", obj[cfg.split])
    if cfg.split != EVAL_SPLIT and EVAL_SPLIT in obj:
        return main, _dataset_table(f"{where}, split '{EVAL_SPLIT}'", obj[EVAL_SPLIT])
    return main, None


def _load_disk(path: Path) -> Any:
    if not path.exists():
        raise DataError(f"Dataset folder not found: {path}. Check the path.")
    if path.is_file():
        raise DataError(f"{path} is a file, not a saved dataset folder: choose data source 'file'.")
    import datasets

    try:
        return datasets.load_from_disk(str(path))
    except FileNotFoundError:
        raise DataError(
            f"{path} is not a folder saved with save_to_disk. Save one with "
            "dataset.save_to_disk(folder), or choose data source 'file' for a data file."
        ) from None


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in _TRUE


def _datasets_cache_dir() -> str:
    """The datasets cache as the environment says now (datasets.config froze it at import)."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return os.path.expanduser(os.environ["HF_DATASETS_CACHE"])
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expanduser(os.environ["HF_HOME"]), "datasets")
    import datasets.config

    return str(datasets.config.HF_DATASETS_CACHE)


def _cached_subsets(cfg: DataConfig, cache_dir: str) -> tuple[Path, list[str]]:
    """Where datasets caches this id, and the subsets (configs) found there."""
    from datasets.naming import camelcase_to_snakecase

    parts = cfg.path.split("/")
    parts[-1] = camelcase_to_snakecase(parts[-1])
    root = Path(cache_dir, "___".join(parts))
    return root, sorted({p.parent.parent.name for p in root.glob("*/*/*") if p.is_dir()})


def _from_hub_cache(cfg: DataConfig, cache_dir: str, root: Path, subsets: list[str]) -> Any:
    """The dataset from the local cache without any network access, or None when not cached."""
    from datasets.packaged_modules.cache.cache import Cache

    if not subsets or (cfg.subset and cfg.subset not in subsets):
        return None
    if not cfg.subset and len(subsets) > 1:
        raise DataError(
            f"The cache holds several subsets of '{cfg.path}': {', '.join(subsets)}. Set "
            "'Subset' (data.subset) to the one you want."
        )
    try:
        builder = Cache(
            cache_dir=cache_dir,
            dataset_name=cfg.path.split("/")[-1],
            repo_id=cfg.path,
            config_name=cfg.subset or None,
            version="auto",
            hash="auto",
        )
        builder.download_and_prepare()
        return builder.as_dataset()
    except (OSError, ValueError) as exc:
        raise DataError(
            f"The cached copy of '{cfg.path}' in {root} cannot be read ({exc}). Delete that "
            "folder and load the dataset again with a network connection."
        ) from None


def _load_hub(cfg: DataConfig) -> Any:
    if Path(cfg.path).expanduser().exists():
        raise DataError(
            f"'{cfg.path}' is a local path, not a hub id: choose data source 'file' for a data "
            "file or 'disk' for a folder saved with save_to_disk."
        )
    cache_dir = _datasets_cache_dir()
    root, subsets = _cached_subsets(cfg, cache_dir)
    cached = _from_hub_cache(cfg, cache_dir, root, subsets)
    if cached is not None:
        return cached
    name = cfg.path + (f" (subset {cfg.subset})" if cfg.subset else "")
    missing = f"The hub dataset '{name}' is not in the local cache ({cache_dir})"
    if subsets:
        missing += f"; only its subset(s) {', '.join(subsets)} are"
    advice = (
        "Connect to the internet and load it once (it is then cached for offline use), or "
        "download it elsewhere and use a local file (data source 'file')."
    )
    import datasets

    offline_flags = (_env_flag("HF_HUB_OFFLINE"), _env_flag("HF_DATASETS_OFFLINE"))
    if datasets.config.HF_HUB_OFFLINE or any(offline_flags):
        raise DataError(
            f"{missing}, and offline mode is on (HF_HUB_OFFLINE), so there is no network to "
            f"download it. {advice}"
        )
    from grpo_desktop.engine.data.hub import hub_host, hub_reachable

    if not hub_reachable():  # offline the library retries for half a minute: say so at once
        raise DataError(
            f"{missing}, and the Hugging Face hub ({hub_host()[0]}) cannot be reached (no "
            f"network). {advice}"
        )
    try:
        return datasets.load_dataset(cfg.path, cfg.subset or None, cache_dir=cache_dir)
    except ConnectionError:
        raise DataError(
            f"{missing}, and the Hugging Face hub cannot be reached (no network). {advice}"
        ) from None
    except (OSError, ValueError) as exc:  # not found, gated, subset missing: the library says which
        raise DataError(
            f"Cannot load the hub dataset '{name}': {exc}. Check the id (e.g. openai/gsm8k) and "
            "the subset (e.g. main)."
        ) from None


def open_source(cfg: DataConfig, limit: int | None = None) -> tuple[Table, Table | None]:
    """The chosen split (at most `limit` rows) and the 'test' split when training on another.

    - file: .jsonl (one JSON object per line), .json (an array of objects, or JSON lines), .csv
      (header row first), .parquet, chosen by the file's extension.
    - disk: a folder written by `datasets`' `save_to_disk` (a Dataset, or a DatasetDict: `split`).
    - hub: a Hugging Face dataset id. A copy in the local datasets cache is used first, without
      touching the network (fast, repeatable, works offline; delete the cache folder to refresh).
      Otherwise it is downloaded, unless HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set, in which
      case the error says it is not cached. The cache folder and offline flags are read from the
      environment when loading, not only when `datasets` was first imported.
    """
    if cfg.source not in ("file", "disk", "hub"):
        raise DataError(
            f"Unknown data source '{cfg.source}'; choose arithmetic, file, disk or hub."
        )
    text = cfg.path.strip()
    if not text:
        raise DataError(f"Data source '{cfg.source}' needs a path or dataset id in data.path.")
    if cfg.source == "file":
        return _open_file(Path(text).expanduser(), limit), None
    if cfg.source == "disk":
        path = Path(text).expanduser()
        return _pick_split(_load_disk(path), cfg, str(path))
    return _pick_split(_load_hub(cfg), cfg, f"hub dataset '{text}'")
