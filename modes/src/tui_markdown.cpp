// Markdown rows for the terminal UI (see tui_markdown.hpp): cmark-gfm parses, this lays out.

#include <coagent/modes/tui_markdown.hpp>
#include <coagent/modes/tui_text.hpp>

#include <cmark-gfm-core-extensions.h>
#include <cmark-gfm-extension_api.h>
#include <cmark-gfm.h>

#include <algorithm>
#include <memory>
#include <string>

namespace coagent::tui {

namespace {

// ---- inline text ------------------------------------------------------------------------------

struct run {
    std::string text;  // sanitized
    span_style style = span_style::plain;
};
using runs = std::vector<run>;

std::string_view type_name(cmark_node* n) {
    const char* t = cmark_node_get_type_string(n);
    return t ? std::string_view(t) : std::string_view();
}

std::string literal(cmark_node* n) {
    const char* s = cmark_node_get_literal(n);
    return s ? std::string(s) : std::string();
}

span_style with(span_style base, span_style add) {
    if ((base == span_style::bold && add == span_style::italic) ||
        (base == span_style::italic && add == span_style::bold) || base == span_style::bold_italic)
        return span_style::bold_italic;
    return add;
}

void inlines(cmark_node* parent, span_style st, runs& out);

std::string plain_text(cmark_node* parent) {
    runs r;
    inlines(parent, span_style::plain, r);
    std::string s;
    for (const auto& x : r) s += x.text;
    return s;
}

void inlines(cmark_node* parent, span_style st, runs& out) {
    for (cmark_node* n = cmark_node_first_child(parent); n; n = cmark_node_next(n)) {
        switch (cmark_node_get_type(n)) {
            case CMARK_NODE_TEXT:
                out.push_back({sanitize(literal(n)), st});
                break;
            case CMARK_NODE_CODE:
                out.push_back({sanitize(literal(n)), span_style::code});
                break;
            case CMARK_NODE_SOFTBREAK:
                out.push_back({" ", st});
                break;
            case CMARK_NODE_LINEBREAK:
                out.push_back({"\n", st});
                break;
            case CMARK_NODE_EMPH:
                inlines(n, with(st, span_style::italic), out);
                break;
            case CMARK_NODE_STRONG:
                inlines(n, with(st, span_style::bold), out);
                break;
            case CMARK_NODE_LINK: {
                inlines(n, span_style::link, out);
                const char* u = cmark_node_get_url(n);
                const std::string url = u ? sanitize(u) : std::string();
                if (!url.empty() && url != plain_text(n) && "mailto:" + plain_text(n) != url)
                    out.push_back({" (" + url + ")", span_style::dim});
                break;
            }
            case CMARK_NODE_IMAGE:
                out.push_back({"[image: " + plain_text(n) + "]", span_style::dim});
                break;
            case CMARK_NODE_HTML_INLINE:
                out.push_back({sanitize(literal(n)), span_style::dim});
                break;
            default:
                if (type_name(n) == "strikethrough")
                    inlines(n, span_style::dim, out);
                else
                    inlines(n, st, out);
        }
    }
}

// ---- rows ---------------------------------------------------------------------------------------

struct row_builder {
    std::vector<screen_row>& rows;
    int width;
    int used = 0;
    bool open = false;

    void new_row() {
        rows.push_back(screen_row{"", row_style::assistant, {}});
        used = 0;
        open = true;
    }
    void put(std::string_view text, span_style st) {
        if (!open) new_row();
        auto& r = rows.back();
        if (st != span_style::plain && !text.empty()) {
            if (!r.spans.empty() && r.spans.back().style == st &&
                r.spans.back().end == r.text.size())
                r.spans.back().end += text.size();
            else
                r.spans.push_back({r.text.size(), r.text.size() + text.size(), st});
        }
        r.text += text;
        used += display_width(text);
    }
};

// Greedy word wrap of styled runs: a word may span runs ("**bold**,"); "\n" ends a row; a word
// wider than the row is split between characters.
std::vector<screen_row> wrap_runs(const runs& in, int width) {
    std::vector<screen_row> rows;
    row_builder b{rows, std::max(width, 1)};
    struct piece {
        std::string text;
        span_style style;
    };
    std::vector<piece> word;
    int word_w = 0;
    bool space = false;
    const auto place = [&] {
        if (word.empty()) return;
        if (b.open && b.used + (space ? 1 : 0) + word_w > b.width && b.used > 0) b.new_row();
        if (b.open && b.used > 0 && space) {
            // a space inside a styled stretch ("**two words**") keeps the style
            const auto& sp = rows.back().spans;
            const bool inside = !sp.empty() && sp.back().end == rows.back().text.size() &&
                                sp.back().style == word.front().style;
            b.put(" ", inside ? word.front().style : span_style::plain);
        }
        if (word_w > b.width - b.used) {  // wider than a row: split between characters
            for (const auto& p : word)
                for (std::size_t i = 0; i < p.text.size();) {
                    std::size_t j = i;
                    const char32_t c = decode_utf8(p.text, j);
                    const int cw = char_width(c);
                    if (b.open && b.used + cw > b.width && b.used > 0) b.new_row();
                    b.put(std::string_view(p.text).substr(i, j - i), p.style);
                    i = j;
                }
        } else {
            for (const auto& p : word) b.put(p.text, p.style);
        }
        word.clear();
        word_w = 0;
        space = false;
    };
    for (const auto& r : in) {
        for (std::size_t i = 0; i < r.text.size();) {
            const char ch = r.text[i];
            if (ch == '\n') {
                place();
                if (!b.open) b.new_row();
                b.new_row();
                space = false;
                ++i;
                continue;
            }
            if (ch == ' ' || ch == '\t') {
                place();
                space = b.open && b.used > 0;
                ++i;
                continue;
            }
            std::size_t j = i;
            while (j < r.text.size() && r.text[j] != ' ' && r.text[j] != '\t' && r.text[j] != '\n')
                ++j;
            const std::string_view part = std::string_view(r.text).substr(i, j - i);
            if (!word.empty() && word.back().style == r.style)
                word.back().text += part;
            else
                word.push_back({std::string(part), r.style});
            word_w += display_width(part);
            i = j;
        }
    }
    place();
    if (rows.empty()) rows.push_back(screen_row{"", row_style::assistant, {}});
    return rows;
}

// `first` before the first row, `next` before the others (same width), dim.
void prefix(std::vector<screen_row>& rows, std::string_view first, std::string_view next) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const std::string_view p = i == 0 ? first : next;
        auto& r = rows[i];
        for (auto& sp : r.spans) {
            sp.begin += p.size();
            sp.end += p.size();
        }
        r.text.insert(0, p);
        if (p.find_first_not_of(' ') != std::string_view::npos)
            r.spans.insert(r.spans.begin(), row_span{0, p.size(), span_style::dim});
    }
}

std::string repeat(std::string_view s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
}

std::vector<screen_row> block(cmark_node* n, int width);

// The child blocks of a container, a blank row between them unless `tight`.
std::vector<screen_row> children(cmark_node* n, int width, bool tight) {
    std::vector<screen_row> out;
    for (cmark_node* c = cmark_node_first_child(n); c; c = cmark_node_next(c)) {
        if (!out.empty() && !tight) out.push_back(screen_row{"", row_style::assistant, {}});
        auto rows = block(c, width);
        out.insert(out.end(), rows.begin(), rows.end());
    }
    return out;
}

std::vector<screen_row> table(cmark_node* n, int width) {
    std::vector<std::vector<std::string>> cells;
    std::size_t header_rows = 0;
    for (cmark_node* r = cmark_node_first_child(n); r; r = cmark_node_next(r)) {
        std::vector<std::string> row;
        for (cmark_node* c = cmark_node_first_child(r); c; c = cmark_node_next(c))
            row.push_back(plain_text(c));
        if (cmark_gfm_extensions_get_table_row_is_header(r)) ++header_rows;
        cells.push_back(std::move(row));
    }
    std::size_t cols = 0;
    for (const auto& r : cells) cols = std::max(cols, r.size());
    if (cols == 0) return {};
    std::vector<int> w(cols, 1);
    for (const auto& r : cells)
        for (std::size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], display_width(r[i]));
    // too wide: the widest columns give way (each keeps at least 3 columns)
    const int frame = 3 * static_cast<int>(cols) + 1;
    while (frame + [&] {
        int s = 0;
        for (int x : w) s += x;
        return s;
    }() > width) {
        auto widest = std::max_element(w.begin(), w.end());
        if (*widest <= 3) break;
        --*widest;
    }
    std::vector<screen_row> out;
    const auto rule = [&](std::string_view l, std::string_view m, std::string_view r) {
        std::string t(l);
        for (std::size_t i = 0; i < cols; ++i)
            t += repeat("\u2500", w[i] + 2) + std::string(i + 1 < cols ? m : r);
        out.push_back(screen_row{t, row_style::assistant, {{0, t.size(), span_style::dim}}});
    };
    rule("\u250c", "\u252c", "\u2510");
    for (std::size_t k = 0; k < cells.size(); ++k) {
        screen_row row{"", row_style::assistant, {}};
        for (std::size_t i = 0; i < cols; ++i) {
            const std::string bar = "\u2502";
            row.spans.push_back({row.text.size(), row.text.size() + bar.size(), span_style::dim});
            row.text += bar + " ";
            std::string cell = i < cells[k].size() ? cells[k][i] : std::string();
            cell = truncate_to_width(cell, w[i]);
            const std::size_t at = row.text.size();
            row.text += cell;
            if (k < header_rows && !cell.empty())
                row.spans.push_back({at, row.text.size(), span_style::bold});
            row.text += std::string(static_cast<std::size_t>(w[i] - display_width(cell)) + 1, ' ');
        }
        const std::string bar = "\u2502";
        row.spans.push_back({row.text.size(), row.text.size() + bar.size(), span_style::dim});
        row.text += bar;
        out.push_back(std::move(row));
        if (k + 1 == header_rows) rule("\u251c", "\u253c", "\u2524");
    }
    rule("\u2514", "\u2534", "\u2518");
    return out;
}

std::vector<screen_row> block(cmark_node* n, int width) {
    width = std::max(width, 4);
    switch (cmark_node_get_type(n)) {
        case CMARK_NODE_PARAGRAPH: {
            runs r;
            inlines(n, span_style::plain, r);
            return wrap_runs(r, width);
        }
        case CMARK_NODE_HEADING: {
            runs r;
            inlines(n, span_style::bold, r);
            return wrap_runs(r, width);
        }
        case CMARK_NODE_CODE_BLOCK: {
            std::vector<screen_row> out;
            std::string code = literal(n);
            if (!code.empty() && code.back() == '\n') code.pop_back();
            for (std::size_t start = 0;;) {
                const std::size_t nl = std::min(code.find('\n', start), code.size());
                // long lines are cut into rows, never re-flowed
                const std::string line = sanitize(std::string_view(code).substr(start, nl - start));
                std::size_t i = 0;
                do {
                    std::string part;
                    int used = 0;
                    while (i < line.size()) {
                        std::size_t j = i;
                        const int cw = char_width(decode_utf8(line, j));
                        if (used + cw > width - 2 && used > 0) break;
                        part.append(line, i, j - i);
                        used += cw;
                        i = j;
                    }
                    screen_row r{"  " + part, row_style::assistant, {}};
                    if (!part.empty()) r.spans.push_back({2, r.text.size(), span_style::code});
                    out.push_back(std::move(r));
                } while (i < line.size());
                if (nl >= code.size()) break;
                start = nl + 1;
            }
            return out;
        }
        case CMARK_NODE_HTML_BLOCK: {
            std::string html = literal(n);
            while (!html.empty() && html.back() == '\n') html.pop_back();
            return wrap_runs({{sanitize(html), span_style::dim}}, width);
        }
        case CMARK_NODE_THEMATIC_BREAK: {
            const std::string t = repeat("\u2500", width);
            return {screen_row{t, row_style::assistant, {{0, t.size(), span_style::dim}}}};
        }
        case CMARK_NODE_BLOCK_QUOTE: {
            auto rows = children(n, width - 2, false);
            prefix(rows, "\u2502 ", "\u2502 ");
            return rows;
        }
        case CMARK_NODE_LIST: {
            const bool ordered = cmark_node_get_list_type(n) == CMARK_ORDERED_LIST;
            const bool tight = cmark_node_get_list_tight(n) != 0;
            int number = cmark_node_get_list_start(n);
            std::vector<screen_row> out;
            for (cmark_node* item = cmark_node_first_child(n); item; item = cmark_node_next(item)) {
                const std::string marker = ordered ? std::to_string(number++) + ". " : "\u2022 ";
                const int mw = display_width(marker);
                auto rows = children(item, width - mw, tight);
                if (rows.empty()) rows.push_back(screen_row{"", row_style::assistant, {}});
                prefix(rows, marker, std::string(static_cast<std::size_t>(mw), ' '));
                if (!out.empty() && !tight) out.push_back(screen_row{"", row_style::assistant, {}});
                out.insert(out.end(), rows.begin(), rows.end());
            }
            return out;
        }
        default:
            if (type_name(n) == "table") return table(n, width);
            return children(n, width, false);
    }
}

struct parser_free {
    void operator()(cmark_parser* p) const { cmark_parser_free(p); }
};
struct node_free {
    void operator()(cmark_node* n) const { cmark_node_free(n); }
};

}  // namespace

std::vector<std::vector<screen_row>> markdown_blocks(std::string_view text, int width,
                                                     std::vector<block_position>* positions,
                                                     bool continuing) {
    cmark_gfm_core_extensions_ensure_registered();
    std::unique_ptr<cmark_parser, parser_free> parser(cmark_parser_new(CMARK_OPT_DEFAULT));
    for (const char* ext : {"table", "strikethrough", "autolink"})
        if (auto* e = cmark_find_syntax_extension(ext))
            cmark_parser_attach_syntax_extension(parser.get(), e);
    cmark_parser_feed(parser.get(), text.data(), text.size());
    std::unique_ptr<cmark_node, node_free> doc(cmark_parser_finish(parser.get()));
    std::vector<std::vector<screen_row>> out;
    // line starts, for `positions` (cmark gives a block's first line; CR line ends: not known)
    std::vector<std::size_t> lines;
    if (positions) {
        positions->clear();
        if (text.find('\r') == std::string_view::npos) {
            lines.push_back(0);
            for (std::size_t i = 0; i < text.size(); ++i)
                if (text[i] == '\n') lines.push_back(i + 1);
        }
    }
    for (cmark_node* n = cmark_node_first_child(doc.get()); n; n = cmark_node_next(n)) {
        auto rows = block(n, std::max(width, 4));
        if (!out.empty() || continuing)
            rows.insert(rows.begin(), screen_row{"", row_style::assistant, {}});
        out.push_back(std::move(rows));
        if (positions) {
            const int line = cmark_node_get_start_line(n);
            block_position pos;
            pos.start = line >= 1 && static_cast<std::size_t>(line) <= lines.size()
                            ? lines[static_cast<std::size_t>(line) - 1]
                            : std::string_view::npos;
            // closed: the line before the next block is blank (cmark's end line of a list
            // counts the blank lines after it, so the text is asked, not the node)
            if (cmark_node* next = cmark_node_next(n)) {
                const int nl = cmark_node_get_start_line(next);
                if (nl >= 2 && static_cast<std::size_t>(nl) <= lines.size()) {
                    const std::size_t b = lines[static_cast<std::size_t>(nl) - 2],
                                      e = lines[static_cast<std::size_t>(nl) - 1];
                    pos.closed =
                        text.substr(b, e - b).find_first_not_of(" \t\n") == std::string_view::npos;
                } else {
                    pos.closed = nl > cmark_node_get_end_line(n) + 1;  // CR line ends
                }
            }
            positions->push_back(pos);
        }
    }
    return out;
}

}  // namespace coagent::tui
