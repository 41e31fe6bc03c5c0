/* hp_side.c -- libhttp-parser's reading of a request, collected from its
 * callbacks into a struct diff_message. The parser is paused at the end
 * of the first message so that a pipelined second one is not read.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "hp_side.h"

#include <string.h>

#include <http_parser.h>

bool
diff_text_add(struct diff_text *t, const char *at, size_t n)
{
    if (n > sizeof(t->s) - 1 - t->len)
        return false;
    memcpy(t->s + t->len, at, n);
    t->len += n;
    t->s[t->len] = '\0';
    return true;
}

/* The callbacks: a header's name or value may come in several pieces;
 * a name after a value starts the next header. */
struct collect {
    struct diff_message *m;
    bool in_value, done, overflow;
};

static int
on_url(http_parser *p, const char *at, size_t n)
{
    struct collect *c = p->data;

    c->overflow |= !diff_text_add(&c->m->url, at, n);
    return 0;
}

static int
on_header_field(http_parser *p, const char *at, size_t n)
{
    struct collect *c = p->data;
    struct diff_message *m = c->m;

    if (c->in_value || m->nheaders == 0) {
        if (m->nheaders == DIFF_HEADERS_MAX) {
            c->overflow = true;
            return 1;
        }
        m->nheaders++;
        c->in_value = false;
    }
    c->overflow |= !diff_text_add(&m->name[m->nheaders - 1], at, n);
    return 0;
}

static int
on_header_value(http_parser *p, const char *at, size_t n)
{
    struct collect *c = p->data;
    struct diff_message *m = c->m;

    c->in_value = true;
    if (m->nheaders > 0)
        c->overflow |= !diff_text_add(&m->value[m->nheaders - 1], at, n);
    return 0;
}

static int
on_headers_complete(http_parser *p)
{
    struct collect *c = p->data;

    c->m->chunked = (p->flags & F_CHUNKED) != 0;
    return 0;
}

static int
on_body(http_parser *p, const char *at, size_t n)
{
    struct collect *c = p->data;

    c->overflow |= !diff_text_add(&c->m->body, at, n);
    return 0;
}

static int
on_message_complete(http_parser *p)
{
    struct collect *c = p->data;

    c->done = true;
    c->m->keep_alive = http_should_keep_alive(p) != 0;
    http_parser_pause(p, 1);
    return 0;
}

void
hp_parse_request(const char *buf, size_t len, struct diff_message *m)
{
    http_parser_settings s;
    http_parser p;
    struct collect c = {m, false, false, false};
    size_t n;
    const char *name;

    memset(m, 0, sizeof(*m));
    http_parser_settings_init(&s);
    s.on_url = on_url;
    s.on_header_field = on_header_field;
    s.on_header_value = on_header_value;
    s.on_headers_complete = on_headers_complete;
    s.on_body = on_body;
    s.on_message_complete = on_message_complete;
    http_parser_init(&p, HTTP_REQUEST);
    p.data = &c;
    n = http_parser_execute(&p, &s, buf, len);
    m->major = p.http_major;
    m->minor = p.http_minor;
    name = http_method_str((enum http_method)p.method);
    diff_text_add(&m->method, name, strlen(name));
    if (c.overflow) {
        m->verdict = DIFF_REFUSE;
        m->err = "the differential test's buffers are too small";
    } else if (c.done) {
        m->verdict = DIFF_ACCEPT;
        m->consumed = n;
    } else if (p.upgrade) {
        m->verdict = DIFF_UPGRADE;
        m->consumed = n;
    } else if (HTTP_PARSER_ERRNO(&p) != HPE_OK) {
        m->verdict = DIFF_REFUSE;
        m->err = http_errno_name(HTTP_PARSER_ERRNO(&p));
    } else {
        m->verdict = DIFF_INCOMPLETE;
    }
}
