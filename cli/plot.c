/* plot.c -- `chash plot`: draw a ring as SVG. The circle is the hash space
 * (0 at the top, clockwise); each member's arcs are found by looking up
 * evenly spaced positions, which works for every algorithm; the legend
 * gives each member's exact share. --loads adds key counts as bars.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chash/chash.h"
#include "util.h"

#define CMD "plot"

static const char usage_text[] =
    "usage: chash plot [--algo A] [--hash H] [--points N] [--table-size M]\n"
    "                  --members LIST [--out FILE] [--samples S]\n"
    "                  [--loads [--keys K] [--key-prefix P]]\n"
    "       chash plot --config FILE --pool NAME [--out FILE] [--samples S]\n"
    "                  [--loads [--keys K] [--key-prefix P]]\n"
    "  LIST is name[=weight],... (the weight follows the last '=');\n"
    "  --points N is the ring's points per unit of weight (default 160);\n"
    "  --config FILE --pool NAME takes the pool's members and ring from a\n"
    "  chashd config, as chashd builds it.\n"
    "  Writes an SVG of the ring (to stdout without --out): each member's\n"
    "  arcs in its colour, found by looking up S evenly spaced positions\n"
    "  (default 65536); the legend gives exact shares and weights.\n"
    "  --loads adds a bar chart of key counts per member for K keys\n"
    "  <prefix>0 .. <prefix>K-1 (default 10000, data_key_).\n";

#define LEGEND_MAX 64 /* members listed by name; then "+N more" */
#define RING_CX 300.0
#define RING_CY 320.0
#define RING_R 230.0
#define RING_W 60.0

struct plot {
    struct chash_ring *ring;
    struct cli_ring r; /* the members and how the ring is built */
    uint32_t samples;
    bool loads;
    uint64_t nkeys;
    const char *prefix;
    FILE *f;
    const char **zones; /* the zones met, in order (zoned pools) */
    size_t nzones;
};

/* Twelve colours that stay apart from each other; beyond them, hues by
 * the golden angle so neighbours in the array still differ. */
static void
member_colour(size_t i, char *buf, size_t len)
{
    static const char *const palette[] = {
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
        "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a",
    };
    const size_t np = sizeof(palette) / sizeof(palette[0]);

    if (i < np) {
        snprintf(buf, len, "%s", palette[i]);
        return;
    }
    /* HSL(h, 0.65, 0.5) to RGB, by the CSS formula */
    double h = fmod((double)(i - np) * 137.508, 360.0) / 60.0;
    double s = 0.65, l = 0.5, ch = (1 - fabs(2 * l - 1)) * s;
    double x = ch * (1 - fabs(fmod(h, 2.0) - 1)), m = l - ch / 2;
    double r = 0, g = 0, b = 0;
    switch ((int)h) {
    case 0:
        r = ch;
        g = x;
        break;
    case 1:
        r = x;
        g = ch;
        break;
    case 2:
        g = ch;
        b = x;
        break;
    case 3:
        g = x;
        b = ch;
        break;
    case 4:
        r = x;
        b = ch;
        break;
    default:
        r = ch;
        b = x;
        break;
    }
    snprintf(buf, len, "#%02x%02x%02x", (unsigned)lround((r + m) * 255),
             (unsigned)lround((g + m) * 255), (unsigned)lround((b + m) * 255));
}

static void
xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&apos;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

static void
point_at(double frac, double radius, double *x, double *y)
{
    double a = 2 * M_PI * frac - M_PI / 2;
    *x = RING_CX + radius * cos(a);
    *y = RING_CY + radius * sin(a);
}

/* The inner ring of zones (zone_policy: hierarchical): its radii. */
#define ZONE_R (RING_R - RING_W / 2 - 22.0)
#define ZONE_W 24.0

/* One arc from <from> to <to> (fractions of the circle, to > from, at
 * most one half so the SVG arc flags stay unambiguous), drawn as a
 * filled annular sector: strokes of tiny arcs render as artefacts.
 * Member <m>'s on the ring, or with <zone>, zone <m>'s on the inner ring
 * of zones. */
static void
arc(struct plot *p, size_t m, bool zone, double from, double to)
{
    const double ro = zone ? ZONE_R + ZONE_W / 2 : RING_R + RING_W / 2,
                 ri = zone ? ZONE_R - ZONE_W / 2 : RING_R - RING_W / 2;
    char colour[16];
    double x0, y0, x1, y1, x2, y2, x3, y3;

    /* zones take the colours after the members' */
    member_colour(zone ? p->r.ms.n + m : m, colour, sizeof(colour));
    point_at(from, ro, &x0, &y0);
    point_at(to, ro, &x1, &y1);
    point_at(to, ri, &x2, &y2);
    point_at(from, ri, &x3, &y3);
    if (zone) {
        fprintf(p->f, "<path class=\"zone-arc\" data-zone=\"");
        xml_text(p->f, p->zones[m]);
    } else {
        fprintf(p->f, "<path class=\"arc\" data-member=\"");
        xml_text(p->f, p->r.ms.m[m].name);
    }
    fprintf(p->f,
            "\" fill=\"%s\" d=\"M %.2f %.2f A %.0f %.0f 0 0 1 %.2f %.2f "
            "L %.2f %.2f A %.0f %.0f 0 0 0 %.2f %.2f Z\"/>\n",
            colour, x0, y0, ro, ro, x1, y1, x2, y2, ri, ri, x3, y3);
}

static void
draw_run(struct plot *p, size_t m, bool zone, uint32_t start, uint32_t end)
{
    double s = (double)start / p->samples, e = (double)end / p->samples;

    while (e - s > 0.5) {
        arc(p, m, zone, s, s + 0.5);
        s += 0.5;
    }
    arc(p, m, zone, s, e);
}

/* The index of member <m>'s zone in p->zones (made on first use). */
static size_t
zone_index(struct plot *p, size_t m)
{
    const char *z = p->r.ms.zones[m] ? p->r.ms.zones[m] : "-";

    for (size_t i = 0; i < p->nzones; i++)
        if (strcmp(p->zones[i], z) == 0)
            return i;
    p->zones[p->nzones] = z;
    return p->nzones++;
}

/* Sample the circle and draw each run of one owner as an arc. */
static void
draw_ring(struct plot *p)
{
    int bits = cli_hash_space_bits(p->r.cfg.algo);
    /* positions are j * step + step / 2 over [0, 2^bits) */
    long double space = bits == 64 ? 18446744073709551616.0L : 4294967296.0L;
    long double step = space / p->samples;
    uint32_t start = 0, zstart = 0;
    size_t owner = 0, zone = 0;
    bool zoned = p->r.ms.zoned && p->zones != NULL;

    for (uint32_t j = 0; j <= p->samples; j++) {
        size_t o = owner, z = zone;
        if (j < p->samples) {
            o = chash_ring_lookup(p->ring, (uint64_t)(step * j + step / 2));
            z = zoned ? zone_index(p, o) : 0;
        }
        if (j == 0) {
            owner = o;
            zone = z;
            continue;
        }
        if (j == p->samples || o != owner) {
            draw_run(p, owner, false, start, j);
            start = j;
            owner = o;
        }
        if (zoned && (j == p->samples || z != zone)) {
            draw_run(p, zone, true, zstart, j);
            zstart = j;
            zone = z;
        }
    }
}

static void
draw_legend(struct plot *p, double x, double y)
{
    char colour[16];
    size_t shown = p->r.ms.n < LEGEND_MAX ? p->r.ms.n : LEGEND_MAX;
    double rest = 0;

    fprintf(p->f,
            "<text x=\"%.0f\" y=\"%.0f\" font-weight=\"bold\">member"
            "  weight  exact share</text>\n",
            x, y);
    for (size_t i = 0; i < p->r.ms.n; i++) {
        double share = chash_ring_share(p->ring, i);
        if (i >= shown) {
            rest += share;
            continue;
        }
        double ly = y + 22.0 * (double)(i + 1);
        member_colour(i, colour, sizeof(colour));
        fprintf(p->f, "<g class=\"legend-item\" data-member=\"");
        xml_text(p->f, p->r.ms.m[i].name);
        fprintf(p->f,
                "\" data-weight=\"%" PRIu32 "\" data-share=\"%.9f\">"
                "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" "
                "fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\">",
                p->r.ms.m[i].weight, share, x, ly - 12, colour, x + 20, ly);
        xml_text(p->f, p->r.ms.m[i].name);
        fprintf(p->f, "  w=%" PRIu32 "  %.3f%%", p->r.ms.m[i].weight,
                100.0 * share);
        if (p->r.ms.zoned && p->r.ms.zones[i] != NULL) {
            fputs("  zone ", p->f);
            xml_text(p->f, p->r.ms.zones[i]);
        }
        fputs("</text></g>\n", p->f);
    }
    if (shown < p->r.ms.n)
        fprintf(p->f,
                "<text x=\"%.0f\" y=\"%.0f\">+ %zu more members: "
                "%.3f%%</text>\n",
                x, y + 22.0 * (double)(shown + 1), p->r.ms.n - shown,
                100.0 * rest);
    /* the inner ring: the zones, in the colours after the members' */
    for (size_t k = 0; k < p->nzones && k < LEGEND_MAX; k++) {
        double ly = y + 22.0 * (double)(shown + 2 + k);

        member_colour(p->r.ms.n + k, colour, sizeof(colour));
        fprintf(p->f, "<g class=\"legend-zone\" data-zone=\"");
        xml_text(p->f, p->zones[k]);
        fprintf(p->f,
                "\"><rect x=\"%.0f\" y=\"%.0f\" width=\"14\" "
                "height=\"14\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\">"
                "zone ",
                x, ly - 12, colour, x + 20, ly);
        xml_text(p->f, p->zones[k]);
        fputs(" (inner ring)</text></g>\n", p->f);
    }
}

/* Key counts per member as bars, with the fair count (by weight) as a
 * dark tick on each bar. */
static int
draw_loads(struct plot *p, double top, double width)
{
    uint64_t *count = calloc(p->r.ms.n, sizeof(*count)), max = 1;
    double wsum = 0, chart_h = 220, left = 60;
    char key[256], colour[16];

    if (count == NULL) {
        cli_error(CMD, "out of memory");
        return -1;
    }
    for (uint64_t k = 0; k < p->nkeys; k++) {
        int n = snprintf(key, sizeof(key), "%s%" PRIu64, p->prefix, k);
        size_t off, len;

        if (n < 0 || (size_t)n >= sizeof(key))
            n = (int)strlen(key);
        /* a redis or memcache pool hashes the tagged part only */
        len = chash_key_tag(key, (size_t)n, p->r.tag, &off);
        count[chash_ring_lookup(p->ring,
                                chash_ring_hash(p->ring, key + off, len))]++;
    }
    for (size_t i = 0; i < p->r.ms.n; i++) {
        wsum += p->r.ms.m[i].weight;
        if (count[i] > max)
            max = count[i];
    }
    double bw = (width - left - 20) / (double)p->r.ms.n;
    fprintf(p->f,
            "<g class=\"loads\"><text x=\"%.0f\" y=\"%.0f\" "
            "font-weight=\"bold\">keys per member (%" PRIu64
            " keys; tick = fair share by weight)</text>\n",
            left, top, p->nkeys);
    for (size_t i = 0; i < p->r.ms.n; i++) {
        double h = chart_h * (double)count[i] / (double)max;
        double fair =
            wsum > 0 ? (double)p->nkeys * p->r.ms.m[i].weight / wsum : 0;
        double x = left + bw * (double)i, base = top + 20 + chart_h;
        member_colour(i, colour, sizeof(colour));
        fprintf(p->f, "<rect class=\"bar\" data-member=\"");
        xml_text(p->f, p->r.ms.m[i].name);
        fprintf(p->f,
                "\" data-keys=\"%" PRIu64 "\" x=\"%.2f\" y=\"%.2f\" "
                "width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n",
                count[i], x + bw * 0.1, base - h, bw * 0.8, h, colour);
        double fy = base - chart_h * fair / (double)max;
        fprintf(p->f,
                "<line x1=\"%.2f\" x2=\"%.2f\" y1=\"%.2f\" y2=\"%.2f\" "
                "stroke=\"#000\" stroke-width=\"2\"/>\n",
                x, x + bw, fy, fy);
        if (p->r.ms.n <= 32) {
            fprintf(p->f,
                    "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\" "
                    "text-anchor=\"middle\">%" PRIu64 "</text>\n",
                    x + bw / 2, base - h - 4, count[i]);
            fprintf(p->f,
                    "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\" "
                    "text-anchor=\"middle\">",
                    x + bw / 2, base + 14);
            xml_text(p->f, p->r.ms.m[i].name);
            fprintf(p->f, "</text>\n");
        }
    }
    fprintf(p->f, "</g>\n");
    free(count);
    return 0;
}

static int
render(struct plot *p)
{
    size_t legend_lines = (p->r.ms.n < LEGEND_MAX ? p->r.ms.n : LEGEND_MAX) + 2;
    double width = 960, ring_h = 660;
    double legend_h = 60 + 22.0 * (double)legend_lines;
    double height = legend_h > ring_h ? legend_h : ring_h;
    double loads_top = height;
    char what[128];

    if (p->loads)
        height += 280;
    fprintf(p->f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
            "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "font-family=\"sans-serif\" font-size=\"14\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            width, height, width, height);
    cli_ring_describe(p->ring, what, sizeof(what));
    fprintf(p->f, "<text x=\"20\" y=\"30\" font-size=\"18\" "
                  "font-weight=\"bold\">chash plot: ");
    if (p->r.config != NULL) {
        fprintf(p->f, "pool ");
        xml_text(p->f, p->r.pool);
        fprintf(p->f, ", ");
    }
    fprintf(p->f, "%zu members, ", p->r.ms.n);
    xml_text(p->f, what);
    fprintf(p->f, "</text>\n");
    if (p->r.cfg.algo != CHASH_ALGO_RING &&
        p->r.cfg.algo != CHASH_ALGO_KETAMA && p->r.cfg.algo != CHASH_ALGO_NGINX)
        fprintf(p->f,
                "<text x=\"20\" y=\"%.0f\" font-size=\"12\">%s places "
                "each hash on its own (no arcs): the circle shows the owners "
                "of %" PRIu32 " evenly spaced hashes</text>\n",
                RING_CY * 2 + 5, chash_algo_name(p->r.cfg.algo), p->samples);
    draw_ring(p);
    fprintf(p->f,
            "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
            "stroke=\"#000\" stroke-width=\"2\"/>\n"
            "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" "
            "font-size=\"12\">0 (hash space runs clockwise to 2^%d)</text>\n",
            RING_CX, RING_CY - RING_R - RING_W / 2 - 6, RING_CX,
            RING_CY - RING_R + RING_W / 2, RING_CX,
            RING_CY - RING_R - RING_W / 2 - 12,
            cli_hash_space_bits(p->r.cfg.algo));
    draw_legend(p, 600, 70);
    if (p->loads && draw_loads(p, loads_top, width) != 0)
        return -1;
    fprintf(p->f, "</svg>\n");
    return 0;
}

/* `chash plot`: options, the rings, the SVG. Long (about 110 lines):
 * its getopt loop and checks, read as the man page lists them. */
int
cmd_plot(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"members", required_argument, NULL, 'm'},
        {"algo", required_argument, NULL, 'a'},
        {"hash", required_argument, NULL, 'H'},
        {"points", required_argument, NULL, 'p'},
        {"table-size", required_argument, NULL, 't'},
        {"out", required_argument, NULL, 'o'},
        {"samples", required_argument, NULL, 'S'},
        {"loads", no_argument, NULL, 'l'},
        {"keys", required_argument, NULL, 'k'},
        {"key-prefix", required_argument, NULL, 'P'},
        {"config", required_argument, NULL, CLI_OPT_CONFIG},
        {"pool", required_argument, NULL, CLI_OPT_POOL},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct plot p = {.samples = 65536, .nkeys = 10000, .prefix = "data_key_"};
    const char *out = NULL;
    char *buf = NULL;
    size_t buflen = 0;
    bool keys_given = false;
    int c, ropt, rc = CLI_EXIT_USAGE;

    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            out = optarg;
            break;
        case 'S':
            if (cli_parse_u32(CMD, "--samples", optarg, 64, 1u << 24,
                              &p.samples) != 0)
                goto usage;
            break;
        case 'l':
            p.loads = true;
            break;
        case 'k':
            if (cli_parse_u64(CMD, "--keys", optarg, 1, 100000000, &p.nkeys) !=
                0)
                goto usage;
            keys_given = true;
            break;
        case 'P':
            p.prefix = optarg;
            break;
        case 'h':
            fputs(usage_text, stdout);
            rc = CLI_EXIT_OK;
            goto out;
        default:
            if ((ropt = cli_ring_option(CMD, c, optarg, &p.r)) < 0)
                goto usage;
            if (ropt > 0)
                break;
            rc = cli_bad_option(CMD, usage_text, argv, c);
            goto out;
        }
    }
    if (optind < argc) {
        rc = cli_usage_error(CMD, usage_text, "unexpected argument '%s'",
                             argv[optind]);
        goto out;
    }
    if (keys_given && !p.loads) {
        rc = cli_usage_error(CMD, usage_text, "--keys goes with --loads");
        goto out;
    }
    rc = cli_ring_setup(CMD, usage_text, &p.r, true);
    if (rc != CLI_EXIT_OK)
        goto out;
    rc = CLI_EXIT_FAIL;
    if (cli_ring_create(CMD, &p.r.cfg, &p.r.ms, &p.ring) != 0)
        goto out;
    if (p.r.ms.zoned &&
        (p.zones = calloc(p.r.ms.n ? p.r.ms.n : 1, sizeof(*p.zones))) == NULL) {
        cli_error(CMD, "out of memory");
        goto out;
    }
    /* Render into memory first so a failure leaves no half-written file. */
    p.f = open_memstream(&buf, &buflen);
    if (p.f == NULL || render(&p) != 0) {
        cli_error(CMD, "out of memory");
        goto out;
    }
    fclose(p.f);
    p.f = NULL;
    FILE *dst = out ? fopen(out, "w") : stdout;
    if (dst == NULL) {
        cli_error(CMD, "cannot write %s: %m", out);
        goto out;
    }
    if (fwrite(buf, 1, buflen, dst) != buflen ||
        (out ? fclose(dst) : fflush(dst)) != 0) {
        cli_error(CMD, "cannot write %s: %m", out ? out : "stdout");
        goto out;
    }
    rc = CLI_EXIT_OK;
    goto out;
usage:
    fputs(usage_text, stderr);
    rc = CLI_EXIT_USAGE;
out:
    free(p.zones);
    if (p.f != NULL)
        fclose(p.f);
    free(buf);
    chash_ring_destroy(p.ring);
    cli_ring_deinit(&p.r);
    return rc;
}
