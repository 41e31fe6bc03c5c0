/* test_tcp.c -- mode tcp's key: the client address as the text `chash
 * lookup` takes (IPv4 dotted, IPv6 compressed, IPv4-mapped as IPv4, with
 * the port for source_ip_port), and refusals for what has no address.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/un.h>

#include <cmocka.h>

#include "conf/conf.h"
#include "proto/proto.h"
#include "proto/http.h"
#include "proto/modes.h"
#include "proto/memcache.h"
#include "proto/redis.h"
#include "proto/tcp.h"

static int
key4(const char *ip, uint16_t port, int hash_key, char *buf, size_t cap)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};

    assert_int_equal(inet_pton(AF_INET, ip, &sin.sin_addr), 1);
    return tcp_conn_key((struct sockaddr *)&sin, sizeof(sin), hash_key, buf,
                        cap);
}

static int
key6(const char *ip, uint16_t port, int hash_key, char *buf, size_t cap)
{
    struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6,
                                .sin6_port = htons(port)};

    assert_int_equal(inet_pton(AF_INET6, ip, &sin6.sin6_addr), 1);
    return tcp_conn_key((struct sockaddr *)&sin6, sizeof(sin6), hash_key, buf,
                        cap);
}

static void
test_ipv4(void **state)
{
    char buf[PROTO_KEY_MAX];

    (void)state;
    assert_int_equal(
        key4("127.0.0.5", 40000, CONF_HASH_KEY_SOURCE_IP, buf, sizeof(buf)), 9);
    assert_string_equal(buf, "127.0.0.5");
    assert_int_equal(
        key4("10.1.2.3", 40000, CONF_HASH_KEY_SOURCE_IP_PORT, buf, sizeof(buf)),
        14);
    assert_string_equal(buf, "10.1.2.3:40000");
}

static void
test_ipv6_compressed_and_mapped(void **state)
{
    char buf[PROTO_KEY_MAX];

    (void)state;
    key6("0:0:0:0:0:0:0:1", 1, CONF_HASH_KEY_SOURCE_IP, buf, sizeof(buf));
    assert_string_equal(buf, "::1");
    key6("2001:db8:0:0:0:0:0:42", 8080, CONF_HASH_KEY_SOURCE_IP_PORT, buf,
         sizeof(buf));
    assert_string_equal(buf, "[2001:db8::42]:8080");
    /* a dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d: the key
     * must not depend on the listener's family */
    key6("::ffff:127.0.0.5", 1, CONF_HASH_KEY_SOURCE_IP, buf, sizeof(buf));
    assert_string_equal(buf, "127.0.0.5");
    key6("::ffff:127.0.0.5", 7, CONF_HASH_KEY_SOURCE_IP_PORT, buf, sizeof(buf));
    assert_string_equal(buf, "127.0.0.5:7");
}

static void
test_refusals(void **state)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    struct sockaddr_in sin = {.sin_family = AF_INET};
    char buf[PROTO_KEY_MAX], tiny[4];

    (void)state;
    assert_int_equal(tcp_conn_key((struct sockaddr *)&sun, sizeof(sun),
                                  CONF_HASH_KEY_SOURCE_IP, buf, sizeof(buf)),
                     -1);
    /* truncated address length */
    assert_int_equal(tcp_conn_key((struct sockaddr *)&sin, 4,
                                  CONF_HASH_KEY_SOURCE_IP, buf, sizeof(buf)),
                     -1);
    /* no room */
    assert_int_equal(
        key4("127.0.0.5", 1, CONF_HASH_KEY_SOURCE_IP, tiny, sizeof(tiny)), -1);
}

static void
test_plugin_table(void **state)
{
    (void)state;
    assert_ptr_equal(proto_find(CONF_MODE_TCP), &proto_tcp);
    assert_ptr_equal(proto_find(CONF_MODE_REDIS), &proto_redis);
    assert_ptr_equal(proto_find(CONF_MODE_HTTP), &proto_http);
    assert_null(proto_find(-1));
    assert_ptr_equal(proto_find(CONF_MODE_MEMCACHE), &proto_memcache);
    assert_string_equal(conf_mode_name(CONF_MODE_REDIS), "redis");
    /* tcp is a connection mode: a key per connection, no request
     * parsing, and a connect is its health check */
    assert_non_null(proto_tcp.conn_key);
    assert_null(proto_tcp.parse_request);
    assert_null(proto_tcp.parse_reply);
    assert_null(proto_tcp.probe);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipv4),
        cmocka_unit_test(test_ipv6_compressed_and_mapped),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_plugin_table),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
