// Preloaded (node --import) into a `stepwise worker --backend aws` process: the table refuses that process's
// first commit (TransactWriteCommand) as IAM does, a fault neither DynamoDB Local nor fauxqs produces.
import { DynamoDBServiceException } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';

const send = DynamoDBDocumentClient.prototype.send;
let refused = false;
DynamoDBDocumentClient.prototype.send = function (command, ...rest) {
  if (!refused && command?.constructor?.name === 'TransactWriteCommand') {
    refused = true;
    return Promise.reject(new DynamoDBServiceException({
      name: 'AccessDeniedException', $fault: 'client', $metadata: { httpStatusCode: 400 },
      message: 'User: arn:aws:iam::123456789012:user/ops is not authorized to perform: dynamodb:PutItem on resource: arn:aws:dynamodb:us-east-1:123456789012:table/t because no identity-based policy allows the dynamodb:PutItem action',
    }));
  }
  return send.call(this, command, ...rest);
};
