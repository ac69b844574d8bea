// klab/cli/verb_exercise.cpp — the verbs around an exercise (verb_exercise.hpp):
//
//   klab hint NN [--all]       the next hint of lessons/NN-*/hints.md, one more each call;
//                              the count seen is kept in the progress file ("aids")
//   klab solution NN [--force] solutions/NN-*/exercise.cu, once the exercise has passed;
//                              --force shows it before, and the progress file notes it
//   klab reset NN [--yes]      lessons/NN-*/exercise.cu back to the stub of git's HEAD,
//                              after a confirmation, the learner's file saved first as
//                              exercise.cu.<UTC time>.bak beside it
//   ... NNb                    each of them for the lesson's second CUDA exercise
//                              (Lesson::more_exercises): its own file and hints file
//   ... --triton               each of them for the lesson's Triton exercise instead:
//                              exercise_triton.py, whose hints are the numbered items of
//                              its docstring's "Hints" paragraph (parse_docstring_hints)
//
// and the parts of `klab check` that concern the learner's files: the progress file is
// checked before the work, a pass that cannot be saved is an error, and an exercise.cu
// newer than the binary is a warning (the edits are not compiled in).
#include "verb_exercise.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "klab/cli.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/report.hpp"

extern char** environ;

namespace klab {

namespace fs = std::filesystem;

namespace {

// The learner's file of the exercise the verb is about, and the flag that names it again.
std::string exercise_file(const ExerciseVerbArgs& a, const ExerciseInfo& e) {
  return a.triton ? "exercise_triton.py" : e.file;
}
const char* triton_flag(const ExerciseVerbArgs& a) { return a.triton ? " --triton" : ""; }
// "lesson 09", or "exercise 09b (attention backward)" for a lesson's further exercise.
std::string exercise_label(const ExerciseInfo& e) {
  return e.title.empty() ? "lesson " + e.id : fmt::format("exercise {} ({})", e.id, e.title);
}

// Where the exercise's completed twin lives: solutions/<the folder's last name>.
std::string solutions_folder(const ExerciseInfo& e) { return "solutions/" + fs::path(e.folder).filename().string(); }

bool read_text(const fs::path& p, std::string& out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return false;
  out = ss.str();
  return true;
}

// The progress file as a usage matter: a corrupt or foreign file is the user's to fix.
ProgressData load_progress_or_usage() {
  try {
    return load_progress();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

std::string trim_blank_lines(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto line_start = s.rfind('\n', b);
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(line_start == std::string::npos ? 0 : line_start + 1,
                  e + 1 - (line_start == std::string::npos ? 0 : line_start + 1));
}

// ---- hint ----------------------------------------------------------------------------

int cmd_hint(const ExerciseVerbArgs& a) {
  const ExerciseInfo e = exercise_for(a.lesson, a.triton);
  const Lesson& l = *e.lesson;
  ProgressData d = load_progress_or_usage();
  // A CUDA exercise's hints are its hints file (hints.md); the Triton exercise's, its
  // docstring's "Hints".
  const std::string rel = e.folder + "/" + (a.triton ? "exercise_triton.py" : e.hints);
  std::string text;
  if (!read_text(source_root() / rel, text))
    throw Error(fmt::format("{}: cannot be read ({}); the source tree is {}", rel, std::strerror(errno),
                            source_root().string()));
  const auto hints = a.triton ? parse_docstring_hints(text, rel) : parse_hints(text, rel);
  const int n = static_cast<int>(hints.size());
  int& seen_field = a.triton ? d.aids[e.id].triton_hints_seen : d.aids[e.id].hints_seen;
  const int seen = std::min(seen_field, n);
  const char* tf = triton_flag(a);
  const char* id = e.id.c_str();
  const std::string who = exercise_label(e) + (a.triton ? " (Triton exercise)" : "");
  auto show = [&](int k) {
    const std::string title = e.title.empty() ? fmt::format("lesson {} ({})", l.id, l.slug) : exercise_label(e);
    std::printf("Hint %d of %d — %s%s\n\n%s\n", k, n, title.c_str(), a.triton ? " (Triton exercise)" : "",
                hints[k - 1].c_str());
  };
  if (a.all) {
    if (seen == 0) {
      std::printf("No hint of %s seen yet: `klab hint %s%s` shows the first of %d.\n", who.c_str(), id, tf, n);
      return kExitOk;
    }
    for (int k = 1; k <= seen; ++k) {
      if (k > 1) std::printf("\n");
      show(k);
    }
    if (seen < n) std::printf("\n(%d of %d seen; `klab hint %s%s` shows the next)\n", seen, n, id, tf);
    return kExitOk;
  }
  if (seen >= n) {
    std::printf("No more hints: you have seen all %d hints of %s (`klab hint %s%s --all` shows them again).\n", n,
                who.c_str(), id, tf);
    return kExitOk;
  }
  const int k = seen + 1;
  seen_field = k;
  std::string not_saved;
  try {
    save_progress(d);
  } catch (const Error& err) {
    not_saved = err.what();
  }
  show(k);
  if (k < n) std::printf("\n(`klab hint %s%s` shows hint %d of %d)\n", id, tf, k + 1, n);
  else std::printf("\n(that was the last hint; `klab hint %s%s --all` shows them all again)\n", id, tf);
  if (!not_saved.empty()) {
    std::fprintf(stderr, "klab: error: this hint was not recorded: %s\n", not_saved.c_str());
    return kExitFail;
  }
  return kExitOk;
}

// ---- solution ------------------------------------------------------------------------

int cmd_solution(const ExerciseVerbArgs& a) {
  const ExerciseInfo e = exercise_for(a.lesson, a.triton);
  ProgressData d = load_progress_or_usage();
  const std::string rel = solutions_folder(e) + "/" + exercise_file(a, e);
  std::string text;
  if (!read_text(source_root() / rel, text))
    throw Error(fmt::format("{}: cannot be read ({}); the source tree is {}", rel, std::strerror(errno),
                            source_root().string()));
  const bool passed = (a.triton ? d.triton : d.exercises).count(e.id) != 0;
  const char* tf = triton_flag(a);
  const char* id = e.id.c_str();
  if (!passed && !a.force) {
    const std::string what = a.triton ? "Triton exercise of lesson " + e.id
                                      : (e.title.empty() ? "exercise of lesson " + e.id : exercise_label(e));
    std::fprintf(stderr,
                 "klab: the %s has not passed yet, so its solution stays closed: `klab check %s%s` "
                 "opens it (stuck? `klab hint %s%s`; to see it now anyway, `klab solution %s%s --force`, which your "
                 "progress notes)\n",
                 what.c_str(), id, tf, id, tf, id, tf);
    return kExitFail;
  }
  if (!passed) {
    // Noted before it is shown: a solution seen early is never left out of the record.
    std::string& seen_at = a.triton ? d.aids[e.id].triton_solution_seen_at : d.aids[e.id].solution_seen_at;
    if (seen_at.empty()) seen_at = utc_now_iso();
    try {
      save_progress(d);
    } catch (const Error& err) {
      std::fprintf(stderr, "klab: error: the solution is not shown: seeing it before passing could not be recorded: %s\n",
                   err.what());
      return kExitFail;
    }
    std::fprintf(stderr, "klab: %s, shown before your exercise passed (`klab progress` notes it)\n", rel.c_str());
  } else {
    std::fprintf(stderr, "klab: %s\n", rel.c_str());
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

// ---- reset ---------------------------------------------------------------------------

}  // namespace

Captured run_capture(const std::vector<std::string>& args, bool with_stderr) {
  Captured c;
  int fds[2];
  if (::pipe(fds) != 0) return c;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  if (with_stderr) posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  else posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> argv;
  for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (err != 0) {
    ::close(fds[0]);
    return c;
  }
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) c.out.append(buf, static_cast<std::size_t>(n));
    else if (n < 0 && errno == EINTR) continue;
    else break;
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  c.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return c;
}

namespace {

// Writes `text` to a new file `path` (never over an existing one), flushed to disk.
void write_new_file(const fs::path& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) throw Error(fmt::format("cannot create {}: {}", path.string(), std::strerror(errno)));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(path.c_str());
      throw Error(fmt::format("cannot write {}: {}", path.string(), std::strerror(e)));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int e = errno;
    ::unlink(path.c_str());
    throw Error(fmt::format("cannot write {}: {}", path.string(), std::strerror(e)));
  }
}

std::string utc_stamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

int cmd_reset(const ExerciseVerbArgs& a) {
  const ExerciseInfo e = exercise_for(a.lesson, a.triton);
  const fs::path root = source_root();
  const std::string rel = e.folder + "/" + exercise_file(a, e);
  const fs::path file = root / rel;

  const Captured top = run_capture({"git", "-C", root.string(), "rev-parse", "--show-toplevel"});
  if (top.rc != 0) {
    std::printf("%s: nothing changed: %s is not a git checkout%s, so there is no stub to restore from\n", rel.c_str(),
                root.string().c_str(), top.rc < 0 ? " (git is not installed)" : "");
    return kExitFail;
  }
  const Captured head = run_capture({"git", "-C", root.string(), "show", "HEAD:./" + rel});
  if (head.rc != 0) {
    std::printf("%s: nothing changed: git's HEAD has no such file\n", rel.c_str());
    return kExitFail;
  }
  std::string current;
  std::error_code ec;
  const bool exists = fs::exists(file, ec);
  if (exists && !fs::is_regular_file(file, ec))
    throw Error(fmt::format("{}: is not a regular file; nothing changed", rel));
  if (exists && !read_text(file, current))
    throw Error(fmt::format("{}: cannot be read ({}); nothing changed", rel, std::strerror(errno)));
  if (exists && current == head.out) {
    // Still one line: a learner who committed their work finds the stub in an older commit.
    std::printf("%s already equals git's HEAD: nothing to reset, nothing changed (committed your work? "
                "`git log -- %s` lists its commits, `git checkout COMMIT -- %s` restores one)\n",
                rel.c_str(), rel.c_str(), rel.c_str());
    return kExitOk;
  }

  if (!a.yes) {
    if (!::isatty(STDIN_FILENO))
      throw UsageError(fmt::format("reset {}{}: no terminal to confirm on; pass --yes to replace {} with git's HEAD "
                                   "(your file is saved first as a .bak beside it)",
                                   e.id, triton_flag(a), rel));
    std::printf("Replace %s with the stub from git's HEAD? Your file is saved first as %s.<UTC time>.bak. [y/N] ",
                rel.c_str(), rel.c_str());
    std::fflush(stdout);
    std::string answer;
    if (!std::getline(std::cin, answer) || (answer != "y" && answer != "Y" && answer != "yes")) {
      std::printf("Nothing changed.\n");
      return kExitFail;
    }
  }

  mode_t mode = 0644;
  struct stat st {};
  if (exists && ::stat(file.c_str(), &st) == 0) mode = st.st_mode & 07777;
  if (exists) {
    // The learner's work first: a backup that cannot be written stops the reset.
    const std::string stamp = utc_stamp();
    fs::path bak;
    for (int i = 0; i < 100; ++i) {
      bak = file.string() + "." + stamp + (i ? "-" + std::to_string(i) : "") + ".bak";
      if (!fs::exists(bak, ec)) break;
    }
    write_new_file(bak, current, mode);
    std::printf("saved your file as %s\n", (fs::path(rel).parent_path() / bak.filename()).string().c_str());
  }
  // The stub goes in by rename: the exercise is the old file or the new one, never half.
  const fs::path tmp = file.string() + ".tmp-" + std::to_string(::getpid());
  write_new_file(tmp, head.out, mode);
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot replace {}: {} (your file is unchanged)", rel, std::strerror(e)));
  }
  if (a.triton)   // check --triton compiles the file and rebuilds klab itself
    std::printf("restored %s from git's HEAD; `klab check %s --triton` compiles it again\n", rel.c_str(), e.id.c_str());
  else
    std::printf("restored %s from git's HEAD; rebuild with `make` before `klab check %s`\n", rel.c_str(), e.id.c_str());
  return kExitOk;
}

}  // namespace

// ---- shared with cli.cpp and the tests -------------------------------------------------

fs::path source_root() {
  fs::path root;
  if (const char* env = std::getenv("KLAB_SOURCE_DIR"); env && *env) {
    root = env;
  } else {
    root = fs::path(__FILE__).parent_path().parent_path().parent_path().lexically_normal();
  }
  std::error_code ec;
  if (!fs::is_directory(root / "lessons", ec))
    throw UsageError(fmt::format("the Kernel Lab source tree is not at {} (it has no lessons/ folder); set "
                                 "KLAB_SOURCE_DIR to the repository's root",
                                 sanitize_text(root.string(), 200)));
  return root;
}

std::vector<std::string> parse_hints(const std::string& text, const std::string& origin) {
  std::vector<std::string> hints;
  std::istringstream in(text);
  std::string line, body;
  bool inside = false, in_fence = false;
  auto finish = [&] {
    if (!inside) return;
    std::string t = trim_blank_lines(body);
    if (t.empty()) throw Error(fmt::format("{}: Hint {} is empty", origin, hints.size() + 1));
    hints.push_back(std::move(t));
    body.clear();
  };
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("```", 0) == 0) in_fence = !in_fence;
    if (!in_fence && line.rfind("## ", 0) == 0) {
      finish();
      const std::string want = fmt::format("## Hint {}", hints.size() + 1);
      if (line.rfind("## Hint", 0) != 0 || trim_blank_lines(line) != want)
        throw Error(fmt::format("{}: '{}' where '{}' was expected (sections are ## Hint 1, ## Hint 2, ...)", origin,
                                sanitize_text(line, 60), want));
      inside = true;
      continue;
    }
    if (inside) body += line + "\n";
  }
  finish();
  if (hints.empty()) throw Error(fmt::format("{}: no '## Hint 1' section", origin));
  return hints;
}

std::vector<std::string> parse_docstring_hints(const std::string& text, const std::string& origin) {
  // The module docstring: from the first triple quote to the next.
  const auto open = text.find("\"\"\"");
  const auto close = open == std::string::npos ? open : text.find("\"\"\"", open + 3);
  if (close == std::string::npos) throw Error(fmt::format("{}: no module docstring, so no hints", origin));
  std::istringstream in(text.substr(open + 3, close - open - 3));
  std::vector<std::string> hints;
  std::string line, body;
  bool in_hints = false;
  std::size_t item_indent = 0;
  auto finish = [&] {
    if (!body.empty()) hints.push_back(trim_blank_lines(body));
    body.clear();
  };
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto b = line.find_first_not_of(" \t"), e = line.find_last_not_of(" \t");
    const std::string t = b == std::string::npos ? "" : line.substr(b, e + 1 - b);
    if (!in_hints) {
      in_hints = t == "Hints";
      continue;
    }
    if (t.empty()) break;   // a blank line ends the paragraph
    const std::size_t indent = line.find_first_not_of(' ');
    const std::size_t next = hints.size() + (body.empty() ? 1 : 2);   // body holds the item before it
    const std::string number = std::to_string(next) + ". ";
    if (t.rfind(number, 0) == 0) {   // the next item
      finish();
      item_indent = indent;
      body = t.substr(number.size()) + "\n";
    } else if (!body.empty() && indent > item_indent) {
      body += t + "\n";
    } else {
      throw Error(fmt::format("{}: in the docstring's Hints, '{}' is neither item {} nor a continuation", origin,
                              sanitize_text(t, 60), next));
    }
  }
  finish();
  if (hints.empty()) throw Error(fmt::format("{}: the docstring has no 'Hints' paragraph with an item '1. '", origin));
  return hints;
}

ExerciseInfo exercise_for(const std::string& key, bool triton) {
  ExerciseInfo e;
  const Lesson* l = nullptr;
  if (find_exercise(key, e, &l)) {
    if (triton && e.id != l->id)
      throw UsageError(fmt::format("exercise {} has no Triton version; the Triton exercise is `klab check {} --triton`",
                                   e.id, l->id));
    if (triton) require_triton_exercise(*l);
    return e;
  }
  if (!l) throw UsageError(fmt::format("unknown lesson '{}' (see `klab list`)", sanitize_text(key, 40)));
  const auto all = exercises_of(*l);
  if (all.empty()) throw UsageError(fmt::format("lesson {} has no exercise", l->id));
  std::string ids;
  for (const auto& x : all) ids += (ids.empty() ? "" : ", ") + x.id;
  throw UsageError(fmt::format("lesson {} has no exercise '{}' (its exercises: {})", l->id, sanitize_text(key, 40), ids));
}

const Impl* triton_exercise_of(const Lesson& l) {
  if (l.exercise_op.empty()) return nullptr;
  for (const Impl* im : registry().impls_of(l.exercise_op))
    if (im->name == kTritonExercise) return im;
  return nullptr;
}

void require_triton_exercise(const Lesson& l) {
  if (triton_exercise_of(l)) return;
  std::string with;
  for (const auto& other : registry().lessons())
    if (triton_exercise_of(other)) with += (with.empty() ? "" : ", ") + other.id;
  throw UsageError(fmt::format("lesson {} has no Triton exercise yet (lessons with one: {})", l.id,
                               with.empty() ? "none in this build" : with));
}

void check_progress_before_run() {
  try {
    check_progress_usable();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// True when `src` was modified after the running binary was built (false when either
// cannot be read).
static bool newer_than_this_binary(const fs::path& src) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return false;
  const auto t_src = fs::last_write_time(src, ec);
  if (ec) return false;
  const auto t_bin = fs::last_write_time(self, ec);
  return !ec && t_src > t_bin;
}

std::string stale_exercise_warning(const Lesson& l, const std::string& file) {
  fs::path root;
  try {
    root = source_root();
  } catch (const Error&) {
    return "";   // no source tree here: nothing to compare
  }
  const std::string rel = klab::lesson_folder(l) + "/" + file;
  if (!newer_than_this_binary(root / rel)) return "";
  return fmt::format("klab: warning: {} is newer than this klab binary: rebuild with `make` first: your edits are not "
                     "in this binary",
                     rel);
}

// The source tree this klab was built from (its tools, whatever KLAB_SOURCE_DIR says).
fs::path built_tree() { return fs::path(__FILE__).parent_path().parent_path().parent_path().lexically_normal(); }

// The first line of a tool's output that says what went wrong (its last non-empty line
// when none starts with the file's path).
std::string error_line(const std::string& out, const std::string& path) {
  std::string last, hit;
  std::size_t b = 0;
  while (b < out.size()) {
    std::size_t e = out.find('\n', b);
    if (e == std::string::npos) e = out.size();
    const std::string line = out.substr(b, e - b);
    if (!line.empty()) last = line;
    if (hit.empty() && line.rfind(path + ":", 0) == 0) hit = line;
    b = e + 1;
  }
  return hit.empty() ? last : hit;
}

bool prepare_triton_exercise(const Impl& im) {
  if (!KLAB_CLI_HAVE_TRITON || im.built_from.empty()) return false;   // `check` says why it cannot run
  std::error_code ec;
  const fs::path py = im.built_from;
  if (!fs::exists(py, ec)) return false;   // a build moved away from its sources: use what is linked
  fs::path shown = py;
  try {
    shown = fs::relative(py, source_root(), ec);
    if (ec || shown.empty() || *shown.begin() == "..") shown = py;
  } catch (const Error&) {
  }
  // 1. Compile it now, into a scratch folder: an error is one line naming the file and line,
  //    not a failed build.
  const fs::path scratch = fs::temp_directory_path(ec) / fmt::format("klab-triton-check-{}", ::getpid());
  const Captured c = run_capture({KLAB_PYTHON_EXE, (built_tree() / "tools" / "triton_aot.py").string(),
                                  py.string(), "--out-dir", scratch.string()},
                                 true);
  fs::remove_all(scratch, ec);
  if (c.rc == -1) throw Error(fmt::format("cannot run {} to compile {}", KLAB_PYTHON_EXE, shown.string()));
  if (c.rc != 0) {
    std::string why = error_line(c.out, py.string());
    if (why.rfind(py.string(), 0) == 0) why = shown.string() + why.substr(py.string().size());
    throw UsageError(fmt::format("{} does not compile: {}", shown.string(), sanitize_text(why, 300)));
  }
  // 2. Newer than this binary: rebuild it (only this target), and say so.
  if (!newer_than_this_binary(py)) return false;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return false;
  std::fprintf(stderr, "klab: %s changed: rebuilding %s (cmake --build)...\n", shown.string().c_str(),
               self.filename().string().c_str());
  const Captured b = run_capture({KLAB_CMAKE_COMMAND, "--build", KLAB_BUILD_DIR, "--target", self.filename().string()}, true);
  if (b.rc != 0)
    throw Error(fmt::format("the rebuild failed (run `make` to see why): {}", sanitize_text(error_line(b.out, ""), 300)));
  return true;
}

int record_pass(const ExerciseRecord& r, bool triton) {
  try {
    record_exercise_pass(r, triton);
  } catch (const Error& e) {
    std::fprintf(stderr, "klab: error: passed, but the pass was NOT recorded: %s\n", e.what());
    return kExitFail;
  }
  std::printf("progress recorded in %s (see `klab progress`)\n", progress_path().c_str());
  return kExitOk;
}

std::vector<CLI::App*> add_exercise_verbs(CLI::App& app, ExerciseVerbArgs& a) {
  auto* hint = app.add_subcommand("hint", "the next hint for a lesson's exercise, one more each call");
  hint->add_option("lesson", a.lesson, "the lesson, e.g. 01 (09b: its second exercise)")->required();
  hint->add_flag("--all", a.all, "show every hint seen so far again");
  auto* solution = app.add_subcommand("solution", "the completed exercise, once `klab check` has passed it");
  solution->add_option("lesson", a.lesson, "the lesson, e.g. 01 (09b: its second exercise)")->required();
  solution->add_flag("--force", a.force, "show it before passing (your progress notes it)");
  auto* reset = app.add_subcommand("reset", "put back the exercise's stub from git's HEAD (your file saved as .bak)");
  reset->add_option("lesson", a.lesson, "the lesson, e.g. 01 (09b: its second exercise)")->required();
  reset->add_flag("-y,--yes", a.yes, "do not ask for confirmation");
  for (auto* verb : {hint, solution, reset})
    verb->add_flag("--triton", a.triton, "the lesson's Triton exercise (exercise_triton.py) instead");
  return {hint, solution, reset};
}

int run_exercise_verbs(const std::vector<CLI::App*>& verbs, const ExerciseVerbArgs& a) {
  if (verbs.size() != 3) return -1;
  if (verbs[0]->parsed()) return cmd_hint(a);
  if (verbs[1]->parsed()) return cmd_solution(a);
  if (verbs[2]->parsed()) return cmd_reset(a);
  return -1;
}

}  // namespace klab
