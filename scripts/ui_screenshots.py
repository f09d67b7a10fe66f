"""Copy the UI's browser-test screenshots into docs/results/ui/, small: cropped to the page's content (at
most a height per page), scaled to 75 % and quantised to 64 colours (Pillow).

Run after ``pytest tests/ui/test_browser.py`` (which writes test-artifacts/ui/*.png):
``python scripts/ui_screenshots.py [SOURCE_DIR]``.  Prints each file's size.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image, ImageChops

ROOT = Path(__file__).resolve().parent.parent
#: test screenshot name -> (docs name, the most original pixels of height kept)
PAGES = {"catalog": ("catalog", 700), "env_HotelBooking": ("environment", 900),
         "env_HotelBooking_task_hotel-003": ("task", 800), "env_HotelBooking_state_small": ("state", 700),
         "env_HotelBooking_graph": ("graph", 1000), "graph_building": ("graph_building", 400),
         "rollouts": ("rollouts", 1000), "rollouts_filtered": ("rollouts_filtered", 900),
         "episode_wrong_argument": ("episode", 1200), "compare_sorted": ("compare", 900), "training": ("training", 1300)}


def main(source: Path) -> None:
    out = ROOT / "docs" / "results" / "ui"
    out.mkdir(parents=True, exist_ok=True)
    for name, (target, max_h) in PAGES.items():
        im = Image.open(source / f"{name}.png").convert("RGB")
        background = Image.new("RGB", im.size, im.getpixel((im.width - 1, im.height - 1)))
        box = ImageChops.difference(im, background).getbbox()
        im = im.crop((0, 0, im.width, min(max_h, box[3] + 20 if box else im.height)))
        im = im.resize((im.width * 3 // 4, im.height * 3 // 4), Image.Resampling.LANCZOS)
        path = out / f"{target}.png"
        im.quantize(colors=64, method=Image.Quantize.FASTOCTREE).save(path, optimize=True)
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "test-artifacts" / "ui")
