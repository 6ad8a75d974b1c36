import OutpostCrypto
import Testing
@testable import OutpostServer

/// AWS Signature Version 4 (`SigV4Signer`) against the worked examples of the S3 API
/// reference ("Authenticating Requests: Using the Authorization Header" and "Using Query
/// Parameters"): bucket `examplebucket`, access key `AKIAIOSFODNN7EXAMPLE`, the example
/// secret, `us-east-1`, 2013-05-24T00:00:00Z. A signature that differs in one character
/// fails at S3; so does each of these.
@Suite("S3: Signature Version 4")
struct SigV4Tests {
    static let signer = SigV4Signer(credentials: S3Credentials(accessKeyId: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
                                    region: "us-east-1")
    static let may24: Int64 = 1_369_353_600
    static let host = ("host", "examplebucket.s3.amazonaws.com")

    static func authorization(_ request: SigV4Signer.Request, payloadHash: String = SigV4Signer.emptyPayloadHash) -> String {
        signer.sign(request, payloadHash: payloadHash, secondsSince1970: may24).first { $0.name == "authorization" }?.value ?? ""
    }

    @Test func theGetObjectExampleWithARange() {
        let auth = Self.authorization(.init(method: "GET", path: "/test.txt", headers: [Self.host, ("Range", "bytes=0-9")]))
        #expect(auth == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
                + "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    @Test func thePutObjectExampleSignsItsPayloadAndAKeyWithADollar() {
        let payload = SHA256Hex.of("Welcome to Amazon S3.")
        #expect(payload == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        let auth = Self.authorization(.init(method: "PUT", path: "/test$file.text",
                                            headers: [Self.host, ("Date", "Fri, 24 May 2013 00:00:00 GMT"), ("x-amz-storage-class", "REDUCED_REDUNDANCY")]),
                                      payloadHash: payload)
        #expect(auth.contains("SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,"))
        #expect(auth.hasSuffix("Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"))
    }

    @Test func theBucketExamplesSignTheirQueries() {
        let lifecycle = Self.authorization(.init(method: "GET", path: "/", query: [("lifecycle", "")], headers: [Self.host]))
        #expect(lifecycle.hasSuffix("Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"))
        // Given out of order: the canonical query sorts them.
        let list = Self.authorization(.init(method: "GET", path: "/", query: [("prefix", "J"), ("max-keys", "2")], headers: [Self.host]))
        #expect(list.hasSuffix("Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"))
    }

    @Test func thePresignedURLExample() {
        let query = Self.signer.presignedQuery(method: "GET", path: "/test.txt", host: "examplebucket.s3.amazonaws.com", expires: 86_400, secondsSince1970: Self.may24)
        #expect(query == "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
                + "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
                + "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404")
    }

    @Test func temporaryCredentialsSignTheirSessionToken() {
        let signer = SigV4Signer(credentials: S3Credentials(accessKeyId: "AKID", secretAccessKey: "secret", sessionToken: "token/with+chars"), region: "eu-west-1")
        let headers = signer.sign(.init(method: "HEAD", path: "/b/k", headers: [("host", "s3.local")]), payloadHash: SigV4Signer.unsignedPayload,
                                  secondsSince1970: Self.may24)
        #expect(headers.contains { $0.name == "x-amz-security-token" && $0.value == "token/with+chars" })
        let auth = headers.first { $0.name == "authorization" }?.value ?? ""
        #expect(auth.contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"))
        #expect(auth.contains("Credential=AKID/20130524/eu-west-1/s3/aws4_request"))
        let presigned = signer.presignedQuery(method: "GET", path: "/b/k", host: "s3.local", expires: 300, secondsSince1970: Self.may24)
        #expect(presigned.contains("X-Amz-Security-Token=token%2Fwith%2Bchars"))
    }

    @Test func pathsAreEncodedOnceAndQueriesSorted() {
        #expect(SigV4Signer.canonicalURI("/test$file.text") == "/test%24file.text")
        #expect(SigV4Signer.canonicalURI("/b/a b/ሴ~_.-") == "/b/a%20b/%E1%88%B4~_.-")
        #expect(SigV4Signer.canonicalURI("/b/already%20encoded") == "/b/already%2520encoded", "a decoded path's % is a byte like any other")
        #expect(SigV4Signer.canonicalQuery([("uploadId", "a/b=c"), ("partNumber", "2"), ("a", "2"), ("a", "1")]) == "a=1&a=2&partNumber=2&uploadId=a%2Fb%3Dc")
        let headers = SigV4Signer.canonicalHeaders([("My-Header", "  a   b  "), ("host", "h"), ("my-header", "c")])
        #expect(headers.lines == "host:h\nmy-header:a b,c\n")
        #expect(headers.names == "host;my-header")
    }

    @Test(arguments: [(Int64(0), "19700101T000000Z"), (1_369_353_600, "20130524T000000Z"), (951_827_696, "20000229T123456Z"),
                      (4_102_444_799, "20991231T235959Z"), (-1, "19691231T235959Z")])
    func timesAreWrittenInUTC(seconds: Int64, text: String) {
        #expect(SigV4Signer.amzDate(seconds) == text)
    }
}

/// The SHA-256 of a string in hex.
enum SHA256Hex {
    static func of(_ text: String) -> String { SHA256.hex(Array(text.utf8)) }
}
