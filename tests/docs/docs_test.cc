// The documentation matches the code (README.md and docs/*.md):
// - every flag a command's --help names is documented on that command's
//   page (a flag added and documented nowhere fails);
// - every flag a documented trellis command line uses (in a code block or
//   an inline `trellis CMD ...`) is one that command takes (a flag removed
//   but still documented fails);
// - every relative link resolves: the file exists and, for a page, the
//   #anchor names one of its headings (GitHub's anchors).
// Config fields are held to docs/config.md both ways by
// tests/core:config_test and made to act by tests/launcher:field_test.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/launcher/subprocess.h"

namespace {

const char* kTrellis = "launcher/trellis";

// The pages a command's flags must be documented on.
const std::map<std::string, std::vector<std::string>> kPages = {
    {"train", {"docs/training.md"}}, {"data", {"docs/training.md"}},
    {"check", {"docs/training.md"}}, {"plot", {"docs/training.md"}},
    {"plan", {"docs/planning.md"}},  {"env", {"docs/operations.md"}},
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool IsFlagChar(char c) {
  return std::islower((unsigned char)c) || std::isdigit((unsigned char)c) || c == '-';
}

// Every "--flag" in s (a letter after the dashes; not inside a longer word).
std::vector<std::string> Flags(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 2 < s.size(); i++) {
    if (s[i] != '-' || s[i + 1] != '-' || !std::islower((unsigned char)s[i + 2])) continue;
    if (i > 0 && (std::isalnum((unsigned char)s[i - 1]) || s[i - 1] == '-' || s[i - 1] == '_'))
      continue;
    size_t j = i + 2;
    while (j < s.size() && IsFlagChar(s[j])) j++;
    while (j > i + 2 && s[j - 1] == '-') j--;
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::set<std::string> HelpFlags(const std::string& cmd) {
  RunResult r = RunProcess({kTrellis, cmd, "--help"});
  EXPECT_EQ(r.status, 0) << cmd << ": " << r.output;
  std::set<std::string> f;
  for (const std::string& x : Flags(r.output)) f.insert(x);
  f.insert("--help");
  return f;
}

std::vector<std::string> Documents() {
  std::vector<std::string> docs = {"README.md"};
  if (DIR* d = opendir("docs")) {
    while (struct dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 3 && n.compare(n.size() - 3, 3, ".md") == 0) docs.push_back("docs/" + n);
    }
    closedir(d);
  }
  return docs;
}

// The command lines a page shows: each line of a fenced code block (a line
// ending in '\' joined to the next) and each inline `code` span.
std::vector<std::string> CodeSegments(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line, joined, prose;
  bool fenced = false;
  while (std::getline(in, line)) {
    if (line.compare(0, 3, "```") == 0) {
      fenced = !fenced;
      continue;
    }
    if (fenced) {
      if (!line.empty() && line.back() == '\\') {
        joined += line.substr(0, line.size() - 1) + " ";
        continue;
      }
      out.push_back(joined + line);
      joined.clear();
    } else {
      prose += line + " ";
    }
  }
  for (size_t a = prose.find('`'); a != std::string::npos;) {
    const size_t b = prose.find('`', a + 1);
    if (b == std::string::npos) break;
    out.push_back(prose.substr(a + 1, b - a - 1));
    a = prose.find('`', b + 1);
  }
  return out;
}

// The GitHub anchor of a heading: lower case, spaces to '-', punctuation
// other than '-' and '_' dropped.
std::string Anchor(const std::string& heading) {
  std::string a;
  for (char c : heading) {
    if (c == ' ')
      a += '-';
    else if (std::isalnum((unsigned char)c) || c == '-' || c == '_')
      a += (char)std::tolower((unsigned char)c);
    else if ((unsigned char)c >= 0x80)
      a += c;
  }
  return a;
}

std::set<std::string> Anchors(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  std::string line;
  bool fenced = false;
  while (std::getline(in, line)) {
    if (line.compare(0, 3, "```") == 0) fenced = !fenced;
    if (fenced || line.empty() || line[0] != '#') continue;
    const size_t at = line.find_first_not_of('#');
    if (at != std::string::npos && line[at] == ' ') out.insert(Anchor(line.substr(at + 1)));
  }
  return out;
}

TEST(Docs, EveryFlagOfEveryCommandIsDocumentedOnItsPage) {
  for (const auto& [cmd, pages] : kPages) {
    std::string text;
    for (const std::string& p : pages) {
      text += ReadFile(p);
      ASSERT_FALSE(text.empty()) << p << " not found";
    }
    std::set<std::string> documented;
    for (const std::string& f : Flags(text)) documented.insert(f);
    for (const std::string& f : HelpFlags(cmd)) {
      if (f == "--help") continue;
      EXPECT_TRUE(documented.count(f)) << "trellis " << cmd << " takes " << f
                                       << " (its --help says so); document it in " << pages[0];
    }
  }
}

TEST(Docs, EveryFlagADocumentedCommandLineUsesExists) {
  std::map<std::string, std::set<std::string>> takes;
  for (const auto& kv : kPages) takes[kv.first] = HelpFlags(kv.first);
  int lines = 0;
  for (const std::string& doc : Documents()) {
    for (const std::string& seg : CodeSegments(ReadFile(doc))) {
      // "trellis CMD" (or bazel-bin/launcher/trellis, bazel run ... -- CMD)
      for (size_t at = seg.find("trellis"); at != std::string::npos;
           at = seg.find("trellis", at + 7)) {
        if (at > 0 && !(seg[at - 1] == ' ' || seg[at - 1] == '/' || seg[at - 1] == '(')) continue;
        size_t c = at + 7;
        if (seg.compare(c, 4, " -- ") == 0) c += 3;
        if (c >= seg.size() || seg[c] != ' ') continue;
        size_t e = c + 1;
        while (e < seg.size() && std::islower((unsigned char)seg[e])) e++;
        const std::string cmd = seg.substr(c + 1, e - c - 1);
        if (!takes.count(cmd)) continue;
        // its flags: up to a comment, a pipe, a list or the next command
        size_t end = seg.size();
        for (const char* stop : {" #", "|", ";", "&&", " trellis "}) {
          const size_t s = seg.find(stop, e);
          if (s != std::string::npos && s < end) end = s;
        }
        lines++;
        for (const std::string& f : Flags(seg.substr(e, end - e)))
          EXPECT_TRUE(takes[cmd].count(f))
              << doc << ": `trellis " << cmd << " ... " << f << "`, but trellis " << cmd
              << " takes no " << f << ":\n  " << seg;
      }
    }
  }
  EXPECT_GE(lines, 40) << "too few trellis command lines found: is the parsing broken?";
}

TEST(Docs, EveryRelativeLinkResolves) {
  int links = 0;
  for (const std::string& doc : Documents()) {
    const std::string text = ReadFile(doc);
    const std::string dir =
        doc.find('/') == std::string::npos ? "" : doc.substr(0, doc.rfind('/') + 1);
    for (size_t at = text.find("]("); at != std::string::npos; at = text.find("](", at + 2)) {
      const size_t close = text.find(')', at + 2);
      if (close == std::string::npos) break;
      const std::string target = text.substr(at + 2, close - at - 2);
      if (target.find("://") != std::string::npos || target.compare(0, 7, "mailto:") == 0 ||
          target.find(' ') != std::string::npos)
        continue;
      links++;
      const size_t hash = target.find('#');
      const std::string file = hash == std::string::npos ? target : target.substr(0, hash);
      const std::string path = file.empty() ? doc : dir + file;
      struct stat st;
      if (stat(path.c_str(), &st) != 0) {
        ADD_FAILURE() << doc << ": the link (" << target << ") names " << path
                      << ", which does not exist";
        continue;
      }
      if (hash != std::string::npos && path.size() > 3 &&
          path.compare(path.size() - 3, 3, ".md") == 0) {
        const std::string anchor = target.substr(hash + 1);
        EXPECT_TRUE(Anchors(ReadFile(path)).count(anchor))
            << doc << ": the link (" << target << ") names #" << anchor
            << ", which is no heading of " << path;
      }
    }
  }
  EXPECT_GE(links, 20) << "too few links found: is the parsing broken?";
}

TEST(Docs, TheFrontPageStaysAFrontPage) {
  const std::string readme = ReadFile("README.md");
  size_t lines = 0;
  for (char c : readme) lines += c == '\n';
  EXPECT_LE(lines, 260u) << "README.md is the front page; the details belong in docs/";
  for (const auto& kv : kPages)
    for (const std::string& p : kv.second)
      EXPECT_NE(readme.find("](" + p + ")"), std::string::npos) << "README.md does not link " << p;
}

}  // namespace
