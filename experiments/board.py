"""The main job's live screen: one line per running experiment, under the lines that stay.

  board = Board(sys.stdout)            # a terminal: bars redrawn in place; piped: plain lines
  board.start("cache")
  board.update("cache", done=2, total=8, unit="r4 @ *", step=200, steps=400)
  board.finish("cache", "[1/9] cache: 5.3 SUPPORTED in 312 s")   # its line goes, this stays
  board.close()

A unit is an arm at a point of its axis, trained to its plateau or its step cap. On a terminal
each running experiment has one line, redrawn at most every `refresh` seconds: a bar of its
units done (the running unit counted by its step), the unit training now and its step, and the
time left at the pace so far. Piped (a log file, CI), an experiment gets a plain line when a
unit ends, and otherwise at most one every `every` seconds, so a quick run prints a few lines
per experiment; every step's detail is in the experiment's train.log.
"""

import dataclasses
import math
import shutil
import time

BAR = 20  # characters of a bar


@dataclasses.dataclass
class State:
  """What the board knows of one running experiment."""

  start: float
  done: int = 0
  total: int | None = None
  unit: str | None = None
  step: int | None = None
  steps: int | None = None
  shown: float = -math.inf  # when its last plain line was written
  shown_done: int = -1  # the units done at its last plain line

  def fraction(self):
    """Units done, the running one counted by its step; None before the total is known."""
    if not self.total:
      return None
    part = self.step / self.steps if self.unit and self.step and self.steps else 0.0
    return min(1.0, (self.done + part) / self.total)


def duration(seconds):
  """45s, 3m05s, 1h02m."""
  seconds = int(round(seconds))
  if seconds < 60:
    return f"{seconds}s"
  if seconds < 3600:
    return f"{seconds // 60}m{seconds % 60:02d}s"
  return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def left(state, now):
  """The time left at the pace so far ('' before anything is done)."""
  fraction = state.fraction()
  if not fraction:
    return ""
  return duration((now - state.start) * (1 - fraction) / fraction)


def text(name, state, now, bar):
  """One experiment's line: with a bar (a terminal's) or plain (a log's)."""
  where = ""
  if state.unit:
    where = state.unit + (f" step {state.step}/{state.steps}" if state.step else "")
  eta = left(state, now)
  if bar:
    fraction = state.fraction() or 0.0
    full = round(fraction * BAR)
    units = f"{state.done}/{state.total}" if state.total else "-/-"
    parts = [f"{name:<15}", f"[{'#' * full}{'-' * (BAR - full)}]", f"{units:>5} units", where]
    parts.append(f"{eta} left" if eta else f"{duration(now - state.start)}")
    return "  ".join(p for p in parts if p)
  parts = [f"{state.done}/{state.total} units done" if state.total else "starting"]
  parts += [f"now {where}" if where else "", f"{duration(now - state.start)} so far"]
  parts.append(f"about {eta} left" if eta else "")
  return f"{name}: " + ", ".join(p for p in parts if p)


class Board:
  """The live lines of the running experiments (see the module's docstring)."""

  def __init__(self, stream, tty=None, every=120.0, refresh=0.5, clock=time.monotonic,
               columns=None):  # fmt: skip
    self.stream, self.every, self.refresh, self.clock = stream, every, refresh, clock
    self.columns = columns  # the terminal's width (None: read it at each redraw)
    self.tty = stream.isatty() if tty is None else tty
    self.running = {}
    self.drawn = 0  # live lines on the screen below the lasting ones
    self.drawn_at = -math.inf

  def start(self, name):
    now = self.clock()
    self.running[name] = State(now, shown=now)  # its first plain line: when its units are known
    self._changed()

  def update(self, name, done=None, total=None, unit=None, step=None, steps=None):
    """What a worker sent: the units done of `total`, the unit training now and its step."""
    state = self.running.get(name)
    if state is None:
      return
    if done is not None:
      state.done, state.total = done, total
    state.unit, state.step, state.steps = unit, step, steps
    if not self.tty and state.done != state.shown_done and state.done != state.total:
      self._plain(name, state)  # a unit ended, or the first began (the last: `finish` says)
    self._changed()

  def tick(self):
    """Redraws the terminal's lines, or writes the plain lines that are due."""
    if self.tty:
      self._changed()
      return
    now = self.clock()
    for name, state in self.running.items():
      if now - state.shown >= self.every:
        self._plain(name, state)

  def line(self, text_):
    """A line that stays (above the live ones on a terminal)."""
    self._erase()
    self.stream.write(text_ + "\n")
    self._draw()

  def finish(self, name, text_):
    """Ends `name`'s live line and writes `text_` in its place, to stay."""
    self.running.pop(name, None)
    self.line(text_)

  def close(self):
    self._erase()
    self.running.clear()

  def _plain(self, name, state):
    now = self.clock()
    state.shown, state.shown_done = now, state.done
    self.stream.write(text(name, state, now, bar=False) + "\n")
    self.stream.flush()

  def _changed(self):
    if self.tty and self.clock() - self.drawn_at >= self.refresh:
      self._erase()
      self._draw()

  def _erase(self):
    if self.tty and self.drawn:
      self.stream.write(f"\x1b[{self.drawn}F\x1b[J")  # up to the first live line, clear below
    self.drawn = 0

  def _draw(self):
    if self.tty:
      columns = self.columns or shutil.get_terminal_size((100, 24)).columns
      now, width = self.clock(), columns - 1
      lines = [text(n, s, now, bar=True)[:width] for n, s in self.running.items()]
      self.stream.write("".join(line + "\n" for line in lines))
      self.drawn, self.drawn_at = len(lines), now
    self.stream.flush()
