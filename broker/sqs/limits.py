"""SQS's names, limits and defaults as this endpoint applies them, written once."""

from __future__ import annotations

from contract.limits import SQS_MAX_REQUEST_BYTES

PATH = "/sqs"
# A full-size message with its attributes, JSON-escaped, fits (whatever BROKER_MAX_BODY_BYTES).
MAX_REQUEST_BYTES = SQS_MAX_REQUEST_BYTES
# SQS's limit since 2025: 1 MiB, the body plus its attributes' names, types and values, and the
# sum of a batch's messages. A queue's MaximumMessageSize may lower it.
MAX_MESSAGE_BYTES = 1_048_576
MAX_BATCH = 10
MAX_BATCH_ID = 80
MAX_RECEIVE = 10
MAX_WAIT_S = 20
MAX_VISIBILITY_S = 43_200  # 12 hours
MAX_DELAY_S = 900
MAX_MESSAGE_ATTRIBUTES = 10
MAX_ATTRIBUTE_NAME = 256
MAX_RECEIVE_COUNT = 1000
MAX_LIST_RESULTS = 1000
# A signature's X-Amz-Date may be this far from the broker's clock either way.
SIGNATURE_SKEW_S = 900
# Queue ARNs name a fixed region and account: there is one broker, not an AWS account.
ARN_PREFIX = "arn:aws:sqs:us-east-1:000000000000:"

# Settable queue attributes: name → (model field, lowest, highest, default).
QUEUE_NUMBERS: dict[str, tuple[str, int, int, int]] = {
    "DelaySeconds": ("delay_s", 0, MAX_DELAY_S, 0),
    "MaximumMessageSize": ("max_message_bytes", 1024, 1_048_576, MAX_MESSAGE_BYTES),
    "MessageRetentionPeriod": ("retention_s", 60, 1_209_600, 345_600),
    "ReceiveMessageWaitTimeSeconds": ("receive_wait_s", 0, MAX_WAIT_S, 0),
    "VisibilityTimeout": ("visibility_timeout_s", 0, MAX_VISIBILITY_S, 30),
}


def is_sqs_path(path: str) -> bool:
    """Whether a request path is the SQS endpoint or one of its queue URLs."""
    return path == PATH or path.startswith(PATH + "/")


# FIFO queues: a name's suffix; how long a deduplication id is remembered; MessageGroupId and
# MessageDeduplicationId are 1 to 128 of a-z A-Z 0-9 and ASCII punctuation.
FIFO_SUFFIX = ".fifo"
DEDUP_WINDOW_S = 300
MAX_MESSAGE_TAG = 128
# A SequenceNumber: the task id, zero-padded to this many digits (SQS's are 20 digits long).
SEQUENCE_DIGITS = 20
