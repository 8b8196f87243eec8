package customresource

import (
	"fmt"
	"testing"

	"github.com/google/cel-go/cel"
)

// libCase is one expression of Kubernetes' CEL libraries: what it evaluates to (printed with
// %v), or the start of its compile or evaluation error.
type libCase struct {
	expr string
	want string
	err  string
}

// evalLibrary compiles and runs expr in the rules' base environment, with the cost tracker
// rules run with; it reports the value, or the error.
func evalLibrary(expr string) (string, error) {
	env, err := baseEnv()
	if err != nil {
		return "", err
	}
	ast, iss := env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return "", iss.Err()
	}
	costs := &libraryCosts{}
	if _, err := env.EstimateCost(ast, costs); err != nil {
		return "", fmt.Errorf("estimate: %w", err)
	}
	prg, err := env.Program(ast, programOptions(costs)...)
	if err != nil {
		return "", err
	}
	out, _, err := prg.Eval(cel.NoVars())
	if err != nil {
		return "", err
	}
	return fmt.Sprint(out.Value()), nil
}

func runLibraryCases(t *testing.T, cases []libCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.expr, func(t *testing.T) {
			got, err := evalLibrary(c.expr)
			switch {
			case c.err != "":
				if err == nil || len(err.Error()) < len(c.err) || err.Error()[:len(c.err)] != c.err {
					t.Fatalf("got %q, %v; want error %q", got, err, c.err)
				}
			case err != nil:
				t.Fatalf("error: %v", err)
			case got != c.want:
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestURLLibrary(t *testing.T) {
	runLibraryCases(t, []libCase{
		{expr: "isURL('https://example.com:8443/a%20b?x=1&x=2#frag')", want: "true"},
		{expr: "isURL('/absolute/path')", want: "true"},
		{expr: "isURL('relative/path')", want: "false"},
		{expr: "isURL('')", want: "false"},
		{expr: "url('https://example.com:8443/p').getScheme()", want: "https"},
		{expr: "url('https://example.com:8443/p').getHost()", want: "example.com:8443"},
		{expr: "url('https://[::1]:80/').getHostname()", want: "::1"},
		{expr: "url('https://[::1]:80/').getHost()", want: "[::1]:80"},
		{expr: "url('https://example.com:8443/p').getPort()", want: "8443"},
		{expr: "url('https://example.com/p').getPort()", want: ""},
		{expr: "url('https://example.com/a%20b').getEscapedPath()", want: "/a%20b"},
		{expr: "url('https://example.com/?x=1&x=2&y=')", want: "https://example.com/?x=1&x=2&y="},
		{expr: "url('https://example.com/?x=1&x=2&y=').getQuery() == {'x': ['1', '2'], 'y': ['']}", want: "true"},
		{expr: "url('/p#f') == url('/p#f')", want: "true"},
		{expr: "url('/p') == url('/q')", want: "false"},
		{expr: "url('rel')", err: "URL parse error during conversion from string: parse \"rel\": invalid URI for request"},
		{expr: "url('http://a b')", err: "URL parse error during conversion from string: parse \"http://a b\": invalid character \" \" in host name"},
		{expr: "url(1)", err: "ERROR: <input>:1:4: found no matching overload for 'url' applied to '(int)'"},
	})
}

func TestIPLibrary(t *testing.T) {
	runLibraryCases(t, []libCase{
		{expr: "isIP('192.168.0.1')", want: "true"},
		{expr: "isIP('::1')", want: "true"},
		{expr: "isIP('fe80::1%eth0')", want: "false"},
		{expr: "isIP('::ffff:1.2.3.4')", want: "false"},
		{expr: "isIP('1.2.3')", want: "false"},
		{expr: "ip('192.168.0.1').family()", want: "4"},
		{expr: "ip('2001:db8::1').family()", want: "6"},
		{expr: "string(ip('2001:DB8::1'))", want: "2001:db8::1"},
		{expr: "ip.isCanonical('2001:db8::1')", want: "true"},
		{expr: "ip.isCanonical('2001:DB8::1')", want: "false"},
		{expr: "ip.isCanonical('x')", err: "IP Address \"x\" parse error during conversion from string: ParseAddr(\"x\"): unable to parse IP"},
		{expr: "ip('0.0.0.0').isUnspecified() && ip('::').isUnspecified()", want: "true"},
		{expr: "ip('127.0.0.1').isLoopback() && !ip('10.0.0.1').isLoopback()", want: "true"},
		{expr: "ip('ff02::1').isLinkLocalMulticast()", want: "true"},
		{expr: "ip('169.254.1.1').isLinkLocalUnicast() && ip('fe80::1').isLinkLocalUnicast()", want: "true"},
		{expr: "ip('8.8.8.8').isGlobalUnicast() && !ip('127.0.0.1').isGlobalUnicast()", want: "true"},
		{expr: "ip('10.0.0.1') == ip('10.0.0.1') && ip('10.0.0.1') != ip('10.0.0.2')", want: "true"},
		{expr: "ip('1.2.3.4.5')", err: "IP Address \"1.2.3.4.5\" parse error during conversion from string: ParseAddr(\"1.2.3.4.5\"): IPv4 address too long"},
		{expr: "ip('fe80::1%eth0')", err: "IP address \"fe80::1%eth0\" with zone value is not allowed"},
		{expr: "ip('::ffff:1.2.3.4')", err: "IPv4-mapped IPv6 address \"::ffff:1.2.3.4\" is not allowed"},
	})
}

func TestCIDRLibrary(t *testing.T) {
	runLibraryCases(t, []libCase{
		{expr: "isCIDR('10.0.0.0/8')", want: "true"},
		{expr: "isCIDR('10.0.0.0')", want: "false"},
		{expr: "isCIDR('::ffff:1.2.3.4/120')", want: "false"},
		{expr: "cidr('10.1.2.3/8').prefixLength()", want: "8"},
		{expr: "string(cidr('10.1.2.3/8').masked())", want: "10.0.0.0/8"},
		{expr: "string(cidr('10.1.2.3/8').ip())", want: "10.1.2.3"},
		{expr: "string(cidr('2001:DB8::/32'))", want: "2001:db8::/32"},
		{expr: "cidr('10.0.0.0/8').containsIP('10.1.2.3') && !cidr('10.0.0.0/8').containsIP(ip('11.0.0.1'))", want: "true"},
		{expr: "cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && cidr('10.0.0.0/8').containsCIDR(cidr('10.0.0.0/8'))", want: "true"},
		{expr: "cidr('10.1.0.0/16').containsCIDR('10.0.0.0/8')", want: "false"},
		{expr: "cidr('10.0.0.0/8') == cidr('10.0.0.0/8') && cidr('10.0.0.0/8') != cidr('10.0.0.0/16')", want: "true"},
		{expr: "cidr('10.0.0.0/33')", err: "network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix(\"10.0.0.0/33\"): prefix length out of range"},
		{expr: "cidr('::ffff:1.2.3.4/120')", err: "network address parse error during conversion from string: IPv4-mapped IPv6 address \"::ffff:1.2.3.4/120\" is not allowed"},
		// Kubernetes answers an address that does not parse with "no such overload".
		{expr: "cidr('10.0.0.0/8').containsIP('x')", err: "no such overload"},
		{expr: "cidr('10.0.0.0/8').containsCIDR('x')", err: "network address parse error during conversion from string"},
	})
}

func TestFormatLibrary(t *testing.T) {
	runLibraryCases(t, []libCase{
		{expr: "format.dns1123Label().validate('my-name') == optional.none()", want: "true"},
		{expr: "format.dns1123Label().validate('My_Name').value()", want: "[a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')]"},
		{expr: "format.dns1123Subdomain().validate('a.b-c').hasValue()", want: "false"},
		{expr: "format.dns1035Label().validate('1abc').hasValue()", want: "true"},
		{expr: "format.dns1123LabelPrefix().validate('abc-').hasValue()", want: "false"},
		{expr: "format.dns1123SubdomainPrefix().validate('abc-').hasValue()", want: "false"},
		{expr: "format.dns1035LabelPrefix().validate('abc-').hasValue()", want: "false"},
		{expr: "format.qualifiedName().validate('example.com/Name').hasValue()", want: "false"},
		{expr: "format.labelValue().validate('bad value').hasValue()", want: "true"},
		{expr: "format.uri().validate('relative').value()", want: "[parse \"relative\": invalid URI for request]"},
		{expr: "format.uuid().validate('123e4567-E89B-12d3-a456-426614174000').hasValue()", want: "false"},
		{expr: "format.uuid().validate('nope').value()", want: "[does not match the UUID format]"},
		{expr: "format.byte().validate('aGk=').hasValue()", want: "false"},
		{expr: "format.byte().validate('a').value()", want: "[invalid base64]"},
		{expr: "format.date().validate('2026-11-25').hasValue()", want: "false"},
		{expr: "format.date().validate('2026-13-45').value()", want: "[invalid date]"},
		{expr: "format.datetime().validate('2026-11-25T12:00:00Z').hasValue()", want: "false"},
		{expr: "format.datetime().validate('2026-11-25').value()", want: "[invalid datetime]"},
		{expr: "format.named('dns1123Label').hasValue() && !format.named('nope').hasValue()", want: "true"},
		{expr: "format.named('uuid').value().validate('nope').hasValue()", want: "true"},
		{expr: "format.named('dns1123Label').value() == format.dns1123Label()", want: "true"},
		{expr: "format.named('dns1123Label').value() == format.uuid()", want: "false"},
		{expr: "format.nope()", err: "ERROR: <input>:1:1: undeclared reference to 'format'"},
	})
}

func TestSemverLibrary(t *testing.T) {
	runLibraryCases(t, []libCase{
		{expr: "isSemver('1.2.3-rc.1+build')", want: "true"},
		{expr: "isSemver('v1.2.3')", want: "false"},
		{expr: "isSemver('v1.2.3', true) && isSemver('01.02', true) && isSemver('1', true)", want: "true"},
		{expr: "isSemver('1.2-rc.1', true)", want: "false"},
		{expr: "semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && semver('1.2.3').patch() == 3", want: "true"},
		{expr: "semver('v01.002', true) == semver('1.2.0')", want: "true"},
		{expr: "semver('1.2.3').isGreaterThan(semver('1.2.3-rc.1'))", want: "true"},
		{expr: "semver('1.2.3').isLessThan(semver('1.10.0'))", want: "true"},
		{expr: "semver('2.0.0').compareTo(semver('1.9.9'))", want: "1"},
		{expr: "semver('1.0.0').compareTo(semver('1.0.0+other'))", want: "0"},
		{expr: "semver('v1.0.0')", err: "Invalid character(s) found in major number \"v1\""},
		{expr: "semver('1.0')", err: "No Major.Minor.Patch elements found"},
		{expr: "semver('1.0-rc', true)", err: "short version cannot contain PreRelease/Build meta data"},
		{expr: "semver('1.01.0')", err: "Minor number must not contain leading zeroes \"01\""},
	})
}
